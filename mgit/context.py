"""Context: one open repository's plumbing, what every operation (mgit.ops) works through.

It holds the root and ``.mgit/``, the git graph, the refs, the chunk store, the lock, the
config and identity, the thread pool, a partial clone's promisor (the remote it fetches
missing chunks from, composed into the store; set by mgit.ops.opening) and what a clone
fetched. ``writing()`` is a write command's frame: the lock (whose taking finishes an
interrupted journaled operation: the recovery the opener hands in, since it lives above
this module in mgit.ops), then seal or abort the store. Nothing here knows a porcelain
command.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.repo import get_user_identity

from mgit.errors import BadInputError, NotARepositoryError
from mgit.graph.objects import Graph
from mgit.graph.refs import Refs
from mgit.graph.snapshot import Snapshot, read_snapshot, validate_path
from mgit.lock import RepoLock
from mgit.parallel import make_pool
from mgit.remote.transfer import Transfer
from mgit.store.chunkstore import ChunkStore
from mgit.store.gc import consolidate
from mgit.worktree.index import Index

if TYPE_CHECKING:
    from mgit.remote.promisor import Promisor

GIT_DIR = ".mgit"
# docs/format.md; bumped on incompatible changes (3: difference deltas; 4: content-defined chunks
# of large non-tensor files, mgit.file/2 manifests, patch deltas)
FORMAT_VERSION = 4
# formats 1 (loose chunks), 2 (no difference deltas) and 3 (fixed-size chunks of large non-tensor
# files, no patch deltas) are read, and upgraded on the first write
READABLE_FORMATS = (1, 2, 3, 4)
AUTO_REPACK_PACKS = 32  # more sealed packs than this after a write: merge the small ones


def find_root(start: Path) -> Path:
    """The working tree holding ``start`` (the nearest directory with ``.mgit/HEAD``)."""
    for candidate in [start, *start.parents]:
        if (candidate / GIT_DIR / "HEAD").is_file():
            return candidate
    raise NotARepositoryError(f"not an mgit repository (or any parent up to /): {start}; run `mgit init` first")


class Context:
    """One open repository: ``.mgit/`` (git graph + chunk store) beside a working tree.

    ``on_lock`` runs each time the lock is taken (the journal recovery of mgit.ops)."""

    def __init__(self, path: str | os.PathLike[str] = ".", on_lock: Callable[[Context], None] | None = None):
        self.root: Path = find_root(Path(path).resolve())
        self.git_dir: Path = self.root / GIT_DIR
        self.graph = Graph(self.git_dir)
        try:
            version = self.graph.repo.get_config().get(b"mgit", b"formatversion").decode()
        except KeyError:
            version = "1"
        if version not in {str(v) for v in READABLE_FORMATS}:
            raise NotARepositoryError(
                f"{self.root} uses mgit format {version}; this mgit reads formats "
                f"{', '.join(map(str, READABLE_FORMATS))}: upgrade mgit"
            )
        self.format: int = int(version)
        self.store = ChunkStore(self.git_dir / "chunks")
        self._on_lock = on_lock
        self.lock = RepoLock(self.git_dir / "lock", on_acquire=self._locked)
        self.refs = Refs(self.graph, self.identity())
        self._pool: ThreadPoolExecutor | None = None
        self.promisor: Promisor | None = None  # a partial clone's source of chunks not here (set by the opener)
        self.cloned = Transfer()  # what clone() received (empty unless this object made the clone)

    @staticmethod
    def create(root: Path) -> None:
        """Lay out an empty repository at ``root`` (refused if there is one)."""
        if (root / GIT_DIR / "HEAD").exists():
            raise BadInputError(f"{root} is already an mgit repository")
        root.mkdir(parents=True, exist_ok=True)
        Graph.init(root / GIT_DIR)
        (root / GIT_DIR / "chunks").mkdir()

    def _locked(self) -> None:
        if self._on_lock is not None:
            self._on_lock(self)

    def set_format(self, version: int) -> None:
        config = self.graph.repo.get_config()
        config.set(b"mgit", b"formatversion", str(version).encode())
        config.write_to_path()
        self.format = version

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = make_pool()
        return self._pool

    @property
    def is_partial(self) -> bool:
        """A partial clone: chunks may be missing here and are fetched when needed."""
        return self.promisor is not None

    @property
    def fetched(self) -> Transfer:
        """What this context's reads fetched on demand, checkouts within a budget included (a
        partial clone's; empty in a full clone)."""
        return self.promisor.fetched if self.promisor is not None else Transfer()

    def close(self) -> None:
        self.store.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock; on failure drop the chunks this command wrote but never published."""
        with self.lock:
            if self.format < FORMAT_VERSION:  # this write may add packs: readers must know
                self.set_format(FORMAT_VERSION)
            try:
                yield
                self.store.seal()
            except BaseException:
                self.store.abort()
                raise
            if len(self.store.indexes()) > AUTO_REPACK_PACKS:
                consolidate(self.store)  # each pack costs open files, mmaps and index memory: keep them few

    @contextmanager
    def reading(self) -> Iterator[None]:
        """For commands that read chunks: in a partial clone they may fetch some, so they hold
        the lock and publish (seal) what they fetched when done, even after an error."""
        if self.promisor is None:
            yield
            return
        with self.lock:
            try:
                yield
            finally:
                self.store.seal()

    def identity(self) -> bytes:
        """GIT_AUTHOR_NAME/EMAIL, else user.name/email from .mgit/config or git's config, else the system."""
        return get_user_identity(self.graph.repo.get_config_stack(), "AUTHOR")

    def config_set(self, key: str, value: str) -> None:
        section, _, name = key.rpartition(".")
        if not section or not name:
            raise BadInputError(f"config key {key!r} must look like section.name, e.g. user.name")
        with self.lock:  # the lock holder takes any config.lock for a dead writer's (mgit.lock)
            config = self.graph.repo.get_config()
            config.set(section.encode(), name.encode(), value.encode())
            config.write_to_path()
        self.refs.identity = self.identity()

    def config_get(self, key: str) -> str | None:
        section, _, name = key.rpartition(".")
        try:
            return self.graph.repo.get_config_stack().get(section.encode(), name.encode()).decode()
        except KeyError:
            return None

    def relpath(self, path: str | os.PathLike[str]) -> str:
        """Repository-relative posix path ('' for the root); refuses paths outside."""
        p = Path(path)
        full = os.path.normpath(p if p.is_absolute() else self.root / p)
        rel = os.path.relpath(full, self.root)
        if rel == ".":
            return ""
        rel = rel.replace(os.sep, "/")
        if rel == ".." or rel.startswith("../"):
            raise BadInputError(f"path {str(path)!r} is outside the repository {self.root}")
        return validate_path(rel)

    def clear_staging(self) -> Path:
        """The staging directory of merged files, emptied of what a killed merge left (the
        lock is held: no merge is running)."""
        staging = self.git_dir / "staging"
        shutil.rmtree(staging, ignore_errors=True)
        return staging

    def index(self) -> Index:
        return Index.load(self.git_dir / "mgit-index.json")

    def head_snapshot(self) -> Snapshot:
        head = self.refs.head()
        return read_snapshot(self.graph, self.graph.commit(head).tree) if head else {}

    def snapshot(self, rev: str = "HEAD") -> Snapshot:
        """Path → Entry for every file of a revision."""
        return read_snapshot(self.graph, self.graph.commit(self.refs.resolve(rev)).tree)

    def resolve(self, rev: str) -> str:
        return self.refs.resolve(rev)
