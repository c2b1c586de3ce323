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
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.repo import get_user_identity

from mgit import config
from mgit.errors import BadInputError, NotARepositoryError
from mgit.graph.formats import FORMAT_VERSION, mark_format, read_format
from mgit.graph.objects import Graph
from mgit.graph.refs import Refs
from mgit.graph.snapshot import Snapshot, read_snapshot, validate_path
from mgit.lock import RepoLock
from mgit.worktree.index import Index

if TYPE_CHECKING:  # imported where first used: a command that reads no chunk loads no codec (numpy, zstd)
    from concurrent.futures import ThreadPoolExecutor

    from dulwich.config import ConfigFile

    from mgit.remote.promisor import Promisor
    from mgit.remote.transfer import Transfer
    from mgit.store.chunkstore import ChunkStore

GIT_DIR = ".mgit"
# docs/format.md; bumped on incompatible changes (3: difference deltas; 4: content-defined chunks
# of large non-tensor files, mgit.file/2 manifests, patch deltas)
AUTO_REPACK_PACKS = 32  # more sealed packs than this after a write: merge the small ones


def _scope(scope: str, known: tuple[str, ...] = ("local", "global")) -> str:
    if scope not in known:
        raise BadInputError(f"unknown config scope {scope!r}; use one of {', '.join(known)}")
    return scope


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
        self.format: int = read_format(self.graph, self.root)
        self._store: ChunkStore | None = None
        self._opening_store = threading.Lock()  # the first reads may come from several pool threads at once
        self._on_lock = on_lock
        self.lock = RepoLock(self.git_dir / "lock", on_acquire=self._locked)
        self.refs = Refs(self.graph, self.identity())
        self._pool: ThreadPoolExecutor | None = None
        self.promisor: Promisor | None = None  # a partial clone's source of chunks not here (set by the opener)
        self._cloned: Transfer | None = None  # what clone() received

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
        mark_format(self.graph, version)
        self.format = version

    @property
    def store(self) -> ChunkStore:
        """The chunk store, opened on first use."""
        if self._store is None:
            with self._opening_store:
                if self._store is None:
                    from mgit.store.chunkstore import ChunkStore

                    self._store = ChunkStore(self.git_dir / "chunks")
        return self._store

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            from mgit.parallel import make_pool

            self._pool = make_pool()
        return self._pool

    @property
    def cloned(self) -> Transfer:
        """What clone() received (empty unless this context made the clone)."""
        if self._cloned is None:
            from mgit.remote.transfer import Transfer

            self._cloned = Transfer()
        return self._cloned

    @cloned.setter
    def cloned(self, value: Transfer) -> None:
        self._cloned = value

    @property
    def is_partial(self) -> bool:
        """A partial clone: chunks may be missing here and are fetched when needed."""
        return self.promisor is not None

    @property
    def fetched(self) -> Transfer:
        """What this context's reads fetched on demand, checkouts within a budget included (a
        partial clone's; empty in a full clone)."""
        if self.promisor is not None:
            return self.promisor.fetched
        from mgit.remote.transfer import Transfer

        return Transfer()

    def close(self) -> None:
        if self._store is not None:
            self._store.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    @contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the lock; on failure drop the chunks this command wrote but never published."""
        with self.lock:
            self._upgrade_format()
            try:
                yield
                if self._store is not None:  # a command that never opened the store wrote no chunk
                    self._store.seal()
            except BaseException:
                if self._store is not None:
                    self._store.abort()
                raise
            if self._store is not None and len(self._store.indexes()) > AUTO_REPACK_PACKS:
                from mgit.store.gc import consolidate

                consolidate(self._store)  # each pack costs open files, mmaps and index memory: keep them few

    @contextmanager
    def reading(self) -> Iterator[None]:
        """For commands that read chunks: in a partial clone they may fetch some, so they hold
        the lock and publish (seal) what they fetched when done, even after an error."""
        if self.promisor is None:
            yield
            return
        with self.lock:
            self._upgrade_format()  # a fetched record may be of an encoding older formats lack
            try:
                yield
            finally:
                self.store.seal()

    def _upgrade_format(self) -> None:
        """Mark the repository with this mgit's format before a command may add packs (the lock
        is held): their records and manifests may be of kinds an older format's readers lack."""
        if self.format < FORMAT_VERSION:
            self.set_format(FORMAT_VERSION)

    def identity(self) -> bytes:
        """GIT_AUTHOR_NAME/EMAIL, else user.name/email from .mgit/config, the user's mgit config
        (``mgit config --global``) or git's config, else the system."""
        return get_user_identity(config.stack(self._config()), "AUTHOR")

    def _config(self) -> ConfigFile:
        """``.mgit/config`` as it is now (one that cannot be parsed: one line naming its bad line)."""
        return config.checked(self.git_dir / "config", self.graph.repo.get_config)

    def config_set(self, key: str, value: str, scope: str = "local") -> None:
        """Set a configuration key, as ``mgit config KEY VALUE`` does.

        Args:
            key: ``section.name`` (``section.subsection.name``), checked as git checks keys.
            value: Its value.
            scope: ``"local"`` (``.mgit/config``) or ``"global"`` (the user's mgit config file).

        Raises:
            BadInputError: An invalid key or an unknown scope.
        """
        if _scope(scope) == "global":
            config.global_set(key, value)
        else:
            config.split_key(key)  # a malformed key is refused before the lock
            with self.lock:  # the lock holder takes any config.lock for a dead writer's (mgit.lock)
                config.set_value(self._config(), key, value)
        self.refs.identity = self.identity()

    def config_get(self, key: str, scope: str | None = None) -> str | None:
        """A configuration key's value as this repository reads it.

        Args:
            key: ``section.name``.
            scope: ``"local"`` or ``"global"``: that file only (default: the repository's
                file, the user's mgit file, git's files: the first that sets it).

        Returns:
            The value, or None when nothing sets it.

        Raises:
            BadInputError: An invalid key or an unknown scope.
        """
        if scope is None:
            return config.get(config.stack(self._config()), key)
        if _scope(scope) == "global":
            return config.global_get(key)
        return config.get(self._config(), key)

    def config_list(self, scope: str | None = None) -> list[tuple[str, str, str]]:
        """Every setting mgit reads, lowest precedence first, as ``git config --list`` lists them.

        Args:
            scope: Only one file: ``"git"`` (git's files), ``"global"`` (the user's mgit file)
                or ``"local"`` (``.mgit/config``).

        Returns:
            (scope, key, value) of each setting.

        Raises:
            BadInputError: An unknown scope.
        """
        files = [("git", f) for f in config.git_files()]
        files += [("global", config.read_file(config.global_path())), ("local", self._config())]
        wanted = None if scope is None else _scope(scope, ("local", "global", "git"))
        return [(where, k, v) for where, f in files if wanted in (None, where) for k, v in config.entries(f)]

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
