"""Repository: the porcelain operations, composing the graph, the store, the model
layer and the working tree. Paths given to its methods are absolute or relative to the
repository root.
"""

from __future__ import annotations

import functools
import json
import os
import posixpath
import time
from collections.abc import Iterable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from dulwich.repo import get_user_identity

from mgit.budget import Budget
from mgit.errors import (
    BadInputError,
    BudgetExceededError,
    DirtyWorktreeError,
    LockedError,
    MgitError,
    NotARepositoryError,
    RefUpdateError,
    RevisionError,
)
from mgit.graph import records
from mgit.graph.objects import CommitInfo, Graph
from mgit.graph.refs import Refs, check_ref_name, expire_reflogs, reflog_entries, reflog_ref
from mgit.graph.snapshot import Entry, Snapshot, read_snapshot, validate_path, write_snapshot
from mgit.lock import RepoLock, remove_stale_git_locks, warn
from mgit.maintenance.du import StoreUsage, Usage, commit_usage, measure_store
from mgit.maintenance.fsck import bad_chunks, check_repository, stale_lock_problems
from mgit.maintenance.gc import DEFAULT_GRACE_SECONDS, GcReport, collect, leftover_files
from mgit.maintenance.reach import reachable
from mgit.maintenance.repair import (
    GraphRepair,
    Remotes,
    drop_lost_index_stats,
    restore_objects,
    restore_refs,
    settle,
)
from mgit.merging import Merging
from mgit.model.dtypes import lookup
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.model.ingest import Ingestor, recover_chunks
from mgit.model.materialize import LocalChunks, StagedFile, entry_size, local_chunks, store_reads, write_entry
from mgit.model.projection import combine, project, tensor_count
from mgit.model.safetensors_file import build_header
from mgit.parallel import make_pool, ordered_map
from mgit.progress import byte_progress
from mgit.remote.promisor import Promisor, on_demand
from mgit.remote.transfer import Transfer
from mgit.store.chunkstore import ChunkStore
from mgit.store.gc import consolidate, repack
from mgit.sync import Sync
from mgit.worktree import journal
from mgit.worktree.cost import CheckoutCost, checkout_budget, estimate, over_budget
from mgit.worktree.index import Index, IndexEntry, StatKey
from mgit.worktree.journal import Journal, Write
from mgit.worktree.scan import Ignorer, walk
from mgit.worktree.sparse import SparsePatterns, load_patterns, make_patterns, save_patterns, summarize
from mgit.worktree.status import Status, compare_snapshots, working_matches, worktree_changes

if TYPE_CHECKING:  # diff machinery is imported where used: light commands (status, log) skip it
    import torch

    from mgit.diff.model import ModelDiff
    from mgit.diff.sources import Side


GIT_DIR = ".mgit"
FORMAT_VERSION = 2  # docs/format.md; bumped on incompatible changes
READABLE_FORMATS = (1, 2)  # format 1 (loose chunks) is read, and upgraded on the first write
PARENT_SEARCH_COMMITS = 64  # commits searched for the delta parents a checkout budget prices
AUTO_REPACK_PACKS = 32  # more sealed packs than this after a write: merge them into one


@dataclass
class AddResult:
    added: list[str] = field(default_factory=list)  # new or changed paths staged
    removed: list[str] = field(default_factory=list)  # paths unstaged because their file is gone
    logical_bytes: int = 0
    stored_bytes: int = 0  # bytes newly written to the chunk store
    new_chunks: int = 0


@dataclass
class Repair:
    """What ``fsck --repair`` did."""

    rebuilt_indexes: list[str] = field(default_factory=list)  # packs whose damaged index was rebuilt
    dropped: dict[str, str] = field(default_factory=dict)  # damaged chunk → why
    from_worktree: int = 0  # chunks stored again from working files
    from_remotes: dict[str, int] = field(default_factory=dict)  # remote → chunks fetched
    missing: dict[str, str] = field(default_factory=dict)  # still missing chunk → who needs it
    rewritten_packs: list[str] = field(default_factory=list)  # damaged packs rewritten from their good records
    graph: GraphRepair = field(default_factory=GraphRepair)  # git objects and refs restored or still lost


@dataclass
class CheckoutResult:
    commit: str | None
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    left_out: list[str] = field(default_factory=list)  # sparse: safetensors files with no tensor selected
    chunks_read: int = 0
    bytes_read: int = 0  # stored bytes read from the chunk store
    bytes_fetched: int = 0  # bytes received from the remote (a partial clone)
    cost: CheckoutCost | None = None  # the price checked against a budget (read, fetch)
    detached: bool = False


RESET_MODES = ("soft", "mixed", "hard")


@dataclass
class ResetResult:
    """What ``reset`` did: the ref moved from ``old`` to ``commit``; with ``hard``, the files
    written and removed; with ``mixed``, the paths whose staged entry changed; with ``paths``,
    HEAD stayed (``commit`` = ``old``)."""

    commit: str | None  # None only for ``reset -- PATH`` on an unborn branch
    old: str | None
    mode: str
    branch: str | None  # the branch moved (None: a detached HEAD)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unstaged: list[str] = field(default_factory=list)
    paths: list[str] | None = None  # ``reset REV -- PATH``: the paths reset (HEAD did not move)


@dataclass(frozen=True)
class WorkForm:
    """How a tracked file shows in the working tree: ``entry`` is what the file holds (the
    committed entry, or its sparse projection); not ``written``: no tensor of it is selected."""

    entry: Entry
    written: bool = True

    def projection(self, full: Entry) -> str | None:
        """The index's record of a sparse working file (None: it holds ``full`` itself)."""
        return None if self.entry == full else self.entry.oid


_KEEP = object()  # a checkout that leaves the sparse patterns as they are


@dataclass
class FileInfo:
    path: str
    kind: str
    tensors: int
    logical_bytes: int
    stored_bytes: int


@dataclass
class ShowInfo:
    commit: CommitInfo
    files: list[FileInfo]
    logical_bytes: int
    stored_bytes: int  # unique chunks of this commit as stored


def _find_root(start: Path) -> Path:
    for candidate in [start, *start.parents]:
        if (candidate / GIT_DIR / "HEAD").is_file():
            return candidate
    raise NotARepositoryError(f"not an mgit repository (or any parent up to /): {start}; run `mgit init` first")


class Repository(Merging, Sync):
    """An mgit repository: ``.mgit/`` (git graph + chunk store) beside a working tree."""

    def __init__(self, path: str | os.PathLike[str] = "."):
        self.root = _find_root(Path(path).resolve())
        self.git_dir = self.root / GIT_DIR
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
        self.format = int(version)
        self.store = ChunkStore(self.git_dir / "chunks")
        self.lock = RepoLock(self.git_dir / "lock", on_acquire=self._recover)
        self.refs = Refs(self.graph, self.identity())
        self._pool: ThreadPoolExecutor | None = None
        self.cloned = Transfer()  # what clone() received (empty unless this object made the clone)
        self.promisor: Promisor | None = self._open_promisor()  # a partial clone's source of chunks not here

    @classmethod
    def init(cls, path: str | os.PathLike[str] = ".") -> Repository:
        root = Path(path).resolve()
        if (root / GIT_DIR / "HEAD").exists():
            raise BadInputError(f"{root} is already an mgit repository")
        root.mkdir(parents=True, exist_ok=True)
        Graph.init(root / GIT_DIR)
        (root / GIT_DIR / "chunks").mkdir()
        repo = cls(root)
        repo._set_format(FORMAT_VERSION)
        return repo

    def _set_format(self, version: int) -> None:
        config = self.graph.repo.get_config()
        config.set(b"mgit", b"formatversion", str(version).encode())
        config.write_to_path()
        self.format = version

    # -- plumbing helpers ---------------------------------------------------------------

    @property
    def pool(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = make_pool()
        return self._pool

    def close(self) -> None:
        self.store.close()
        if self._pool is not None:
            self._pool.shutdown()
            self._pool = None

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the lock; on failure drop the chunks this command wrote but never published."""
        with self.lock:
            if self.format < FORMAT_VERSION:  # this write may add packs: readers must know
                self._set_format(FORMAT_VERSION)
            try:
                yield
                self.store.seal()
            except BaseException:
                self.store.abort()
                raise
            if len(self.store.indexes()) > AUTO_REPACK_PACKS:
                consolidate(self.store)  # every lookup searches every pack: keep them few

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

    def _index(self) -> Index:
        return Index.load(self.git_dir / "mgit-index.json")

    def _head_snapshot(self) -> Snapshot:
        head = self.refs.head()
        return read_snapshot(self.graph, self.graph.commit(head).tree) if head else {}

    def snapshot(self, rev: str = "HEAD") -> Snapshot:
        """Path → Entry for every file of a revision."""
        return read_snapshot(self.graph, self.graph.commit(self.refs.resolve(rev)).tree)

    def resolve(self, rev: str) -> str:
        return self.refs.resolve(rev)

    # -- add / rm / commit --------------------------------------------------------------

    def add(self, paths: Iterable[str | os.PathLike[str]] = (".",), base: str | None = None) -> AddResult:
        """Mirror the given paths into the index: new, changed and deleted files.

        Changed tensors are delta-encoded against the same tensors in ``base`` (default
        HEAD) where that is smaller, and their per-chunk change norms are recorded.
        """
        result = AddResult()
        parents = self._parent_lookup(self.snapshot(base) if base else self._head_snapshot())
        with self._writing():
            index = self._index()
            ignorer = Ignorer(self.root)
            todo: dict[str, os.stat_result] = {}
            special: list[str] = []  # FIFOs, sockets, devices: never read
            for p in paths:
                rel = self.relpath(p)
                full = self.root / rel
                under = _under(index.entries, rel)
                if not full.exists():
                    if not under:
                        raise BadInputError(f"pathspec {str(p)!r} did not match any files")
                    found = {}
                elif full.is_file() and ignorer.is_ignored(rel):
                    raise BadInputError(f"{rel} is ignored by .mgitignore; remove the pattern to track it")
                else:
                    found = walk(self.root, rel, ignorer, special, tracked=index.entries)
                _refuse_special([r for r in special if r == rel or r in index.entries])
                for r in under:
                    # A sparse file missing from disk is taken as not checked out (a checkout may
                    # have been interrupted): only `mgit rm` drops tensors a sparse checkout holds.
                    ie = index.entries[r]
                    if r not in found and not ie.skip_worktree and not ie.projection:
                        del index.entries[r]
                        result.removed.append(r)
                for r, st in found.items():
                    ie = index.entries.get(r)
                    if ie is None or not ie.matches(st):
                        todo[validate_path(r)] = st
            total = sum(st.st_size for st in todo.values())
            with byte_progress("add", total) as bar:
                ingestor = Ingestor(self.graph, self.store, self.pool, bar, parents)
                for rel, st in sorted(todo.items()):
                    # Unchanged chunks dedup inside the store, so re-ingesting a touched but
                    # unchanged file writes nothing new and yields the same entry.
                    got = ingestor.file(self.root / rel, rel)
                    after = _unchanged_since(self.root / rel, rel, st)
                    old = index.entries.get(rel)
                    entry, stats = got, records.put_file_stats(self.graph, ingestor.file_stats)
                    if old is not None and old.projection and got.kind == "safetensors":
                        entry, stats = self._unproject(rel, old, got, stats)
                    projection = got.oid if entry != got else None
                    index.set(rel, entry, after, stats, projection)
                    if old is None or old.entry != entry:
                        result.added.append(rel)
            self.store.seal()  # chunks become visible before anything refers to them
            index.save()
        s = ingestor.stats
        result.logical_bytes, result.stored_bytes, result.new_chunks = s.logical_bytes, s.stored_bytes, s.new_chunks
        return result

    def _unproject(self, rel: str, old: IndexEntry, got: Entry, stats: str | None) -> tuple[Entry, str | None]:
        """(full entry, statistics) to stage for a sparse working file now holding ``got``:
        the staged entry as it was if the file is as checked out, else its tensors plus
        those the sparse checkout left out, unchanged."""
        if got == old.worktree:
            return old.entry, old.stats
        return combine(self.graph, old.entry, got, rel), stats

    def rm(self, paths: Iterable[str | os.PathLike[str]], cached: bool = False) -> list[str]:
        """Stop tracking paths; delete the working files too unless ``cached``."""
        removed = []
        with self.lock:
            index = self._index()
            for p in paths:
                rel = self.relpath(p)
                under = _under(index.entries, rel)
                if not under:
                    raise BadInputError(f"pathspec {str(p)!r} did not match any tracked file")
                for r in under:
                    del index.entries[r]
                    removed.append(r)
                    if not cached:
                        (self.root / r).unlink(missing_ok=True)
                        _prune_dirs(self.root, r)
            index.save()
        return removed

    def commit(self, message: str, allow_empty: bool = False) -> str:
        """Commit the index; the current branch moves last, by compare-and-swap."""
        if not message.strip():
            raise BadInputError("empty commit message; pass -m MESSAGE")
        with self.lock:
            index = self._index()
            head = self.refs.head()
            head_snap = self._head_snapshot()
            if head and not allow_empty and index.snapshot() == head_snap:
                # compared as files, not trees: HEAD's tree also holds its own stats record,
                # which a commit of the same files would drop (a commit of nothing)
                raise MgitError("nothing to commit: the index matches HEAD (stage changes with `mgit add`)")
            stats = {
                p: records.file_stats(self.graph, ie.stats)
                for p, ie in index.entries.items()
                if ie.stats and ie.entry != head_snap.get(p)
            }
            tree = write_snapshot(self.graph, index.snapshot(), records.stats_entries(self.graph, stats))
            return self._commit_tree(tree, head, message, allow_empty)

    # -- relative statistics -------------------------------------------------------------

    def _parent_lookup(self, snap: Snapshot):
        """File path → tensors (by name) of the same model directory in ``snap``."""
        cache: dict[str, dict] = {}

        def lookup(rel: str) -> dict:
            model_dir = posixpath.dirname(rel)
            if model_dir not in cache:
                tensors: dict = {}
                for path in _models(snap).get(model_dir, []):
                    for name, m in load_safetensors(self.graph, snap[path].oid, path).manifests.items():
                        tensors.setdefault(name, m)
                cache[model_dir] = tensors
            return cache[model_dir]

        return lookup

    def commit_stats(self, rev: str = "HEAD") -> dict[str, list]:
        """path → [[chunk id, parent chunk id, ‖Δ‖₂], ...] recorded with a commit."""
        return records.read_stats(self.graph, self.graph.commit(self.refs.resolve(rev)).tree)

    def _commit_tree(self, tree: str, head: str | None, message: str, allow_empty: bool = False) -> str:
        if not allow_empty:
            if head and self.graph.commit(head).tree == tree:
                raise MgitError("nothing to commit: the index matches HEAD (stage changes with `mgit add`)")
            if not head and not self.graph.tree(tree):
                raise MgitError("nothing to commit: the index is empty (stage files with `mgit add`)")
        who = self.identity()
        commit = self.graph.put_commit(tree, [head] if head else [], message, who, who)
        kind = "commit" if head else "commit (initial)"
        self.refs.advance_head(head, commit, f"{kind}: {message.strip().splitlines()[0]}")
        return commit

    # -- status / log / show ------------------------------------------------------------

    def status(self) -> Status:
        if journal.exists(self.git_dir):  # an interrupted checkout: finish it first (taking the lock does)
            try:
                with self.lock:
                    pass
            except (LockedError, OSError):
                pass  # its holder is finishing it, or we may not write here: show what is there
        index = self._index()
        seen = dict(index.entries)
        head_snap = self._head_snapshot()
        status = Status(self.refs.current_branch(), self.refs.head())
        status.staged = compare_snapshots(self.graph, head_snap, index.snapshot())
        files = walk(self.root, tracked=index.entries)
        status.unstaged, status.untracked, status.not_checked_out, refreshed = worktree_changes(
            self.graph, self.pool, self.root, index, files
        )
        patterns = load_patterns(self.git_dir)
        if patterns is not None:
            status.sparse = summarize(self.graph, index, patterns)
        if refreshed:
            self._save_refreshed(seen, index)
        return status

    def _save_refreshed(self, seen: dict[str, IndexEntry], index: Index) -> None:
        """Save the stat cache status refreshed, into the index as it is now under the lock:
        an entry another command changed since status read it is left as that command made it."""
        fresh = {p: ie for p, ie in index.entries.items() if seen.get(p) != ie}
        try:
            with self.lock:
                current = self._index()
                for p, ie in fresh.items():
                    if current.entries.get(p) == seen.get(p):
                        current.entries[p] = ie
                current.save()
        except (MgitError, OSError):
            pass  # another process writes, or the disk is full: the cache is refreshed next time

    def log(self, rev: str = "HEAD", paths: Iterable[str] = (), max_count: int | None = None) -> list[CommitInfo]:
        """Commits reachable from ``rev``, newest first; ``paths`` limits to commits touching them."""
        if rev == "HEAD" and self.refs.head() is None:
            return []
        start = self.refs.resolve(rev)
        rels = [self.relpath(p).encode() for p in paths]
        walker = self.graph.repo.get_walker(include=[start.encode()], paths=rels or None, max_entries=max_count)
        return [self.graph.commit(e.commit.id.decode()) for e in walker]

    def show(self, rev: str = "HEAD") -> ShowInfo:
        info = self.graph.commit(self.refs.resolve(rev))
        files, seen = [], set()
        total_logical = total_stored = 0
        for path, entry in sorted(read_snapshot(self.graph, info.tree).items()):
            if entry.kind == "blob":
                size = len(self.graph.blob(entry.oid))
                files.append(FileInfo(path, "file", 0, size, size))
                total_logical += size
                total_stored += size
                continue
            if entry.kind == "safetensors":
                stored = load_safetensors(self.graph, entry.oid, path)
                chunks = [c for m in stored.manifests.values() for c in m.chunks]
                ntensors, logical = len(stored.manifests), stored.file_size
            else:
                chunks = list(load_chunked(self.graph, entry.oid).chunks)
                ntensors, logical = 0, sum(c.size for c in chunks)
            stored_bytes = 0
            for c in {c.id for c in chunks}:
                size = self.store.stored_size(c) if self.store.has(c) else 0
                stored_bytes += size
                if c not in seen:
                    seen.add(c)
                    total_stored += size
            files.append(FileInfo(path, entry.kind, ntensors, logical, stored_bytes))
            total_logical += logical
        return ShowInfo(info, files, total_logical, total_stored)

    def _refuse_dirty(self, what: str) -> None:
        status = self.status()
        dirty = [f.path for f in status.staged + status.unstaged]
        if dirty:
            raise DirtyWorktreeError(
                f"cannot {what} with uncommitted changes ({', '.join(dirty[:3])}); commit them first"
            )

    # -- diff ---------------------------------------------------------------------------

    @on_demand
    def diff(
        self,
        a: str | None = None,
        b: str | None = None,
        *,
        staged: bool = False,
        numeric: bool = True,
        patterns: Iterable[str] = (),
        model: str | None = None,
    ) -> ModelDiff:
        """Compare two revisions; ``b`` None means the working tree (the index if ``staged``),
        ``a`` None means HEAD. Unchanged tensors cost no data read; with ``numeric`` the
        change statistics stream over changed chunks only."""
        from mgit.diff.model import ModelDiff, compare_models
        from mgit.diff.sources import file_diffs, snapshot_side

        model_key = self.relpath(model) if model is not None else None
        patterns = list(patterns)
        snap_a = self.snapshot(a) if a else self._head_snapshot()
        side_a = snapshot_side(self.graph, self.store, snap_a, a or "HEAD", model_key)
        if b is not None:
            side_b = snapshot_side(self.graph, self.store, self.snapshot(b), b, model_key)
        elif staged:
            side_b = snapshot_side(self.graph, self.store, self._index().snapshot(), "index", model_key)
        else:
            side_b = self._worktree_side(side_a, model_key)
        if model_key is not None and not any(m == model_key for m, _ in side_a.tensors | side_b.tensors):
            raise BadInputError(f"no model (safetensors files) in {model!r} on either side of the diff")
        tensors = compare_models(side_a.tensors, side_b.tensors, patterns, numeric, self.pool)
        if patterns and not tensors:
            raise BadInputError(f"no tensor matches {', '.join(map(repr, patterns))}")
        return ModelDiff(side_a.label, side_b.label, tensors, file_diffs(side_a, side_b, tensors), numeric)

    def _worktree_side(self, like: Side, model: str | None) -> Side:
        """The working tree; files the stat cache vouches for are read from the index
        (their manifests), so only modified files are hashed. A file not checked out (a
        sparse checkout left it out) is as the index has it; a sparse file, as checked out,
        is the whole file, and once changed, it still holds the tensors it left out."""
        from mgit.diff.sources import Side, snapshot_side, worktree_side

        index = self._index()
        files = walk(self.root, tracked=index.entries)
        clean = {p: ie.entry for p, ie in index.entries.items() if ie.skip_worktree and p not in files}
        for p, st in files.items():
            ie = index.entries.get(p)
            if ie is not None and (ie.matches(st) or (ie.projection and self._clean(p, ie.worktree, index))):
                clean[p] = ie.entry
        vouched = snapshot_side(self.graph, self.store, clean, "working tree", model)
        hashed = worktree_side(self.root, {p: st for p, st in files.items() if p not in clean}, self.pool, like, model)
        tensors = vouched.tensors | hashed.tensors
        for p in hashed.files:
            ie = index.entries.get(p)
            if ie is not None and ie.projection:
                shown = load_safetensors(self.graph, ie.projection, p).manifests
                whole = snapshot_side(self.graph, self.store, {p: ie.entry}, "working tree", model).tensors
                tensors |= {k: t for k, t in whole.items() if k[1] not in shown and k not in tensors}
        contents, readers = vouched.files | hashed.files, vouched.read_file | hashed.read_file
        return Side("working tree", tensors, contents, readers, vouched.modes | hashed.modes)

    # -- maintenance --------------------------------------------------------------------

    def gc(self, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> GcReport:
        """Remove what no ref, reflog entry or the index reaches (older than the grace period)."""
        with self._writing():
            self._clear_staging()
            remove_stale_git_locks(self.git_dir, warn)  # the object directories too
            return collect(self.graph, self.store, self._index(), grace_seconds)

    def reflog_ref(self, ref: str = "HEAD") -> str:
        """The full ref whose reflog ``reflog(ref)`` reads (``origin/main`` → refs/remotes/origin/main)."""
        return reflog_ref(self.git_dir, self.refs, ref)

    def reflog(self, ref: str = "HEAD") -> list[tuple[str, str, int, str]]:
        """(old id or "", new id, time, message) of each move of ``ref``, newest first; empty
        for a tag (tags keep no reflog, as in git)."""
        out = []
        for e in reversed(reflog_entries(self.git_dir, self.reflog_ref(ref))):
            old = e.old_sha.decode()
            message = e.message.decode(errors="replace")
            out.append(("" if set(old) == {"0"} else old, e.new_sha.decode(), e.timestamp, message))
        return out

    def reflog_expire(self, days: float | None = 90) -> int:
        """Forget reflog entries older than ``days`` (None: all); returns how many. What only
        they kept alive (commits of deleted branches, amended history) gc may then reclaim."""
        with self.lock:
            return expire_reflogs(self.git_dir, None if days is None else time.time() - days * 86400)

    def fsck_repair(self) -> Repair:
        """Restore damaged or missing git objects from the remotes and damaged refs from their
        reflogs or the remotes (:mod:`mgit.maintenance.repair`); rewrite damaged packs from
        their readable records, dropping chunks that fail verification; then store again every
        chunk the history needs and lacks from the working tree's files and from the remotes
        (verified like any fetch). What no source holds is reported, with who needs it.
        In a partial clone only dropped chunks are sought: the others come when needed."""
        with self._writing():
            graph_repair = self._repair_graph()
            rebuilt = self.store.rebuild_damaged_indexes()
            bad = bad_chunks(self.store, self.pool)
            damaged_packs = self.store.damaged_packs()
            if bad or damaged_packs:
                repack(self.store, self.store.ids() - set(bad), grace_seconds=0, force=True)
            reach = reachable(self.graph, self._index())
            missing = {c: who for c, who in reach.chunks.items() if not self.store.has(c, refresh=False)}
            if self.is_partial:
                missing = {c: who for c, who in missing.items() if c in bad}
            files = walk(self.root)
            from_tree = recover_chunks(self.root, sorted(files), set(missing), self.store, self.pool)
            from_remotes = self._recover_from_remotes(set(missing) - from_tree)
            recovered = from_tree | {c for got in from_remotes.values() for c in got}
            return Repair(
                rebuilt_indexes=rebuilt,
                dropped=bad,
                from_worktree=len(from_tree),
                from_remotes={name: len(got) for name, got in from_remotes.items()},
                missing={c: who for c, who in missing.items() if c not in recovered},
                rewritten_packs=damaged_packs,
                graph=graph_repair,
            )

    def _repair_graph(self) -> GraphRepair:
        """Git objects from the remotes, then refs (their reflog, tracking refs, the remotes)."""
        report = GraphRepair()
        remotes = Remotes({name: functools.partial(self._backend, name) for name in self.remotes()})
        try:
            restore_objects(self.graph, self._index(), remotes, report)
            restore_refs(self.graph, remotes, self.identity(), report)
            if report.refs:  # restored refs may name commits whose objects are elsewhere
                restore_objects(self.graph, self._index(), remotes, report)
            drop_lost_index_stats(self._index(), report)
            settle(self.graph, self._index(), report)
        finally:
            remotes.close()
        self.graph._cache.clear()
        return report

    def fsck(self) -> list[str]:
        """Every problem found, one line each (empty: the repository is whole). In a partial
        clone, chunks not fetched yet are not problems."""
        with self.lock:
            stale = stale_lock_problems(self.git_dir, self.lock.cleaned)
            return stale + check_repository(self.graph, self.store, self._index(), self.pool, self.is_partial)

    def leftovers(self) -> list[str]:
        """Temporary files a killed command left in ``.mgit`` (a killed ``fsck --repair``'s
        objects, say): not damage, nothing reads them; gc removes them after its grace period."""
        return [p.relative_to(self.root).as_posix() for p in leftover_files(self.git_dir)]

    def du(self, rev: str = "HEAD") -> Usage:
        return commit_usage(self.graph, self.store, self.refs.resolve(rev))

    def store_usage(self) -> StoreUsage:
        return measure_store(self.store)

    # -- branches and tags --------------------------------------------------------------

    def branches(self) -> dict[str, str]:
        return self.refs.branches()

    def create_branch(self, name: str, rev: str = "HEAD", force: bool = False) -> None:
        """Create branch ``name`` at ``rev``; ``force`` moves an existing one there (not the
        checked-out branch, unless it already is at ``rev``: that is what ``reset`` is for)."""
        with self.lock:
            if force:
                self.refs.force_branch(name, self.refs.resolve(rev), rev)
            else:
                self.refs.create_branch(name, self.refs.resolve(rev))

    def delete_branch(self, name: str, force: bool = True) -> None:
        """Delete a branch; ``force=False`` refuses one not merged into HEAD or its upstream
        (``mgit branch -d``; ``-D`` forces)."""
        with self.lock:
            self.refs.delete_branch(name, force=force)

    def rename_branch(self, old: str, new: str, force: bool = False) -> None:
        """Rename a branch with its reflog; HEAD follows when it is the current one. ``force``
        (``branch -M``) replaces a branch ``new`` that exists, as git does."""
        with self.lock:
            self.refs.rename_branch(old, new, force=force)

    def remote_branches(self) -> dict[str, str]:
        """Remote-tracking branches (``origin/main`` → commit), as fetch and push left them."""
        return self.refs.remote_branches()

    def tags(self) -> dict[str, str]:
        return self.refs.tags()

    def tag(self, name: str, rev: str = "HEAD") -> None:
        with self.lock:
            self.refs.create_tag(name, self.refs.resolve(rev))

    def delete_tag(self, name: str) -> None:
        with self.lock:
            self.refs.delete_tag(name)

    # -- reset --------------------------------------------------------------------------

    @on_demand
    def reset(
        self, rev: str = "HEAD", mode: str = "mixed", paths: Iterable[str | os.PathLike[str]] | None = None
    ) -> ResetResult:
        """Move the current branch (or a detached HEAD) to ``rev``, as git's reset: ``soft``
        keeps the index and the working tree, ``mixed`` makes the index ``rev``'s and keeps the
        working files (they show as modified), ``hard`` makes both ``rev``'s (written by the
        checkout machinery). Without ``hard``, staged changes held by no commit and no working
        file are never dropped. ``paths`` (``reset REV -- PATH``): only their index entries
        become ``rev``'s; HEAD and the working files stay."""
        if mode not in RESET_MODES:
            raise BadInputError(f"unknown reset mode {mode!r}; use one of {', '.join(RESET_MODES)}")
        if paths is not None:
            return self._reset_paths(rev, mode, list(paths))
        with self.lock:
            target = self.refs.resolve(rev)
            old = self.refs.head()
            result = ResetResult(target, old, mode, self.refs.current_branch())
            message = f"reset: moving to {rev}"
            if mode == "hard":
                plan = Journal("reset", rev, target, head="advance", old_head=old, message=message)
                self._reset_worktree(self._index(), self.snapshot(target), result, plan)
                if old == target:  # the journal moved nothing; the reflog still records the reset, as git's
                    self.refs.advance_head(old, target, message)
                return result
            if mode == "mixed":
                index = self._index()
                self._reset_index(index, self.snapshot(target), result)
                index.save()
            self.refs.advance_head(old, target, message)
            return result

    def _reset_paths(self, rev: str, mode: str, paths: list[str | os.PathLike[str]]) -> ResetResult:
        """``reset [REV] -- PATH...``: the index entries at or below each path become ``rev``'s
        (removed where ``rev`` has none); HEAD, the branch and the working files stay. On an
        unborn branch ``HEAD`` has no files: the paths are unstaged."""
        if mode != "mixed":
            raise BadInputError(
                "reset --hard does not take paths; restore files with `mgit checkout REV -- PATH`"
                if mode == "hard"
                else "reset --soft does not take paths; `mgit reset -- PATH` unstages them"
            )
        if not paths:
            raise BadInputError("reset was given an empty list of paths; pass paths=None for a whole reset")
        with self.lock:
            head = self.refs.head()
            unborn = rev == "HEAD" and head is None
            target_snap = {} if unborn else self.snapshot(self.refs.resolve(rev))
            index = self._index()
            result = ResetResult(head, head, mode, self.refs.current_branch(), paths=[])
            only: set[str] = set()
            for p in paths:
                rel = self.relpath(p)
                under = _under(index.entries, rel) + _under(target_snap, rel)
                if not under:
                    raise BadInputError(f"pathspec {rel or '.'!r} did not match any file in the index or in {rev}")
                only.update(under)
                result.paths.append(rel)
            self._reset_index(index, target_snap, result, only)
            index.save()
            return result

    def _reset_index(
        self, index: Index, target_snap: Snapshot, result: ResetResult, only: set[str] | None = None
    ) -> None:
        """``reset --mixed``: stage ``target_snap`` (``only``: at these paths), leaving every
        working file as it is."""
        head_snap = self._head_snapshot()
        lost = [
            p
            for p, ie in sorted(index.entries.items())
            if (only is None or p in only)
            and ie.entry != head_snap.get(p)
            and ie.entry != target_snap.get(p)
            and not self._kept(p, ie, index)
        ]
        if lost:
            shown = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
            fix = "use --hard to discard them" if only is None else "`mgit add` the working file over them first"
            raise DirtyWorktreeError(
                f"reset would drop staged changes in {shown} that no commit or working file holds; "
                f"commit them, or {fix}"
            )
        patterns = load_patterns(self.git_dir)
        for p in sorted(only if only is not None else set(index.entries) | set(target_snap)):
            ie, entry = index.entries.get(p), target_snap.get(p)
            if ie is not None and ie.entry == entry:
                continue
            result.unstaged.append(p)
            if entry is None:
                del index.entries[p]  # the working file, if any, becomes untracked
                continue
            absent = not (self.root / p).exists()
            skip = absent and ie is not None and ie.skip_worktree  # not checked out stays so; else: deleted
            projection = self._form(entry, p, patterns).projection(entry) if not absent else None
            index.entries[p] = IndexEntry(entry, skip_worktree=skip, projection=projection)

    def _kept(self, rel: str, ie: IndexEntry, index: Index) -> bool:
        """Does the working tree still hold what ``ie`` stages (so a mixed reset loses nothing)?"""
        if ie.skip_worktree and not (self.root / rel).exists():
            return False
        return self._clean(rel, ie.worktree, index)

    def _reset_worktree(self, index: Index, target_snap: Snapshot, result: ResetResult, plan: Journal) -> None:
        """``reset --hard``: every tracked file as ``target_snap`` has it (sparse patterns kept);
        files tracked but not in it are deleted, untracked ones are left alone. Journaled as a
        checkout is (``plan``: how HEAD moves), so a killed reset is finished by the next command."""
        patterns = load_patterns(self.git_dir)
        forms = {p: self._form(e, p, patterns) for p, e in target_snap.items()}
        todo = {}
        for p, entry in target_snap.items():
            ie = index.entries.get(p)
            if ie is None or ie.entry != entry or _shown(ie) != forms[p] or not self._holds(p, forms[p], index):
                todo[p] = entry
        plan.writes = {p: Write(e, forms[p].entry, forms[p].written) for p, e in todo.items()}
        plan.removes = sorted(set(index.entries) - set(target_snap))
        plan.patterns = patterns
        written = CheckoutResult(result.commit)
        self._write_files(index, todo, written, forms=forms, plan=plan)
        self._complete(plan, index, written)
        result.written, result.removed = written.written, written.removed

    # -- checkout -----------------------------------------------------------------------

    @on_demand
    def checkout(
        self,
        rev: str | None = None,
        paths: Iterable[str | os.PathLike[str]] | None = None,
        *,
        create_branch: str | None = None,
        force: bool = False,
        include: Iterable[str] | None = None,
        exclude: Iterable[str] | None = None,
        full: bool = False,
        budget: str | int | Budget | None = None,
    ) -> CheckoutResult:
        """Switch to ``rev`` (or create a branch there), or with ``paths`` restore them from it.
        A ``rev`` that names no branch but one remote's branch (``origin/rev``) creates the
        local branch from it, as git does.

        ``include``/``exclude`` (fnmatch patterns on tensor names) make the checkout sparse:
        safetensors files hold only the tensors matching some include (any, if none is given)
        and no exclude; the patterns stay for later checkouts until changed, or until ``full``.
        ``budget`` (``"500MB"``, bytes) refuses, before writing anything, a checkout that would
        read and fetch more than that; measured reads and fetches stay within it."""
        patterns = self._requested_patterns(include, exclude, full, paths)
        limit = checkout_budget(budget)
        if rev is None and patterns is not _KEEP:
            rev = "HEAD"
        with self.lock:
            before = self.store.reads.chunks, self.store.reads.stored_bytes
            fetched_before = self.fetched.bytes
            tracked = self.remote_branch_for(rev) if paths is None and create_branch is None and rev else None
            if tracked is not None:
                rev, create_branch = tracked, rev
            if paths is not None:
                result = self._restore_paths(rev, list(paths), limit)
            else:
                result = self._switch(rev, create_branch, force, patterns=patterns, budget=limit)
            result.chunks_read = self.store.reads.chunks - before[0]
            result.bytes_read = self.store.reads.stored_bytes - before[1]
            result.bytes_fetched = self.fetched.bytes - fetched_before
            return result

    def sparse_patterns(self) -> SparsePatterns | None:
        """The patterns of a sparse checkout (None: the checkout is full)."""
        return load_patterns(self.git_dir)

    def _requested_patterns(
        self,
        include: Iterable[str] | None,
        exclude: Iterable[str] | None,
        full: bool,
        paths: Iterable[str | os.PathLike[str]] | None,
    ) -> SparsePatterns | None | object:
        """New patterns (None: back to full), or _KEEP: this checkout does not change them."""
        # A single pattern given as a string is one pattern, not one per character.
        include = [include] if isinstance(include, str) else list(include or ())
        exclude = [exclude] if isinstance(exclude, str) else list(exclude or ())
        if not (include or exclude or full):
            return _KEEP
        if paths is not None:
            raise BadInputError("--include/--exclude/--full choose what a whole checkout holds; not with paths")
        if full:
            if include or exclude:
                raise BadInputError("--full checks out every tensor: give it without --include/--exclude")
            return None
        return make_patterns(include, exclude)

    def _form(self, entry: Entry, rel: str, patterns: SparsePatterns | None) -> WorkForm:
        """How ``entry`` appears in the working tree under ``patterns``."""
        if patterns is None or entry.kind != "safetensors":
            return WorkForm(entry)
        shown = project(self.graph, entry, patterns.selects, rel)
        if shown == entry:
            return WorkForm(entry)
        return WorkForm(shown, tensor_count(self.graph, shown.oid) > 0)

    def _restore_paths(
        self, rev: str | None, paths: list[str | os.PathLike[str]], budget: int | None = None
    ) -> CheckoutResult:
        index = self._index()
        commit = self.refs.resolve(rev) if rev else None
        source = self.snapshot(commit) if commit else index.snapshot()
        todo: dict[str, Entry] = {}
        for p in paths:
            rel = self.relpath(p)
            hits = {r: source[r] for r in _under(source, rel)}
            if not hits:
                where = f"revision {rev!r}" if rev else "the index"
                raise BadInputError(f"path {str(p)!r} is not in {where}")
            todo.update(hits)
        result = CheckoutResult(commit)
        self._write_files(index, todo, result, budget=budget)
        index.save()
        return result

    def _switch(
        self,
        rev: str | None,
        create_branch: str | None,
        force: bool,
        staged: Mapping[str, StagedFile] | None = None,
        patterns: SparsePatterns | None | object = _KEEP,
        budget: int | None = None,
    ) -> CheckoutResult:
        if rev is None and create_branch is None:
            raise BadInputError("checkout needs a revision, -b NAME, or paths after --")
        target = self.refs.resolve(rev or "HEAD")
        if create_branch is not None:
            check_ref_name(create_branch, "branch")
            if create_branch in self.refs.branches():
                raise BadInputError(f"branch {create_branch!r} already exists")
            self.refs.refuse_clash(f"refs/heads/{create_branch}")  # before the first file is written
        index = self._index()
        head_snap = self._head_snapshot()
        target_snap = self.snapshot(target)
        current = load_patterns(self.git_dir)
        wanted = current if patterns is _KEEP else patterns
        assert wanted is None or isinstance(wanted, SparsePatterns)
        forms = {p: self._form(e, p, wanted) for p, e in target_snap.items()}
        if patterns is not _KEEP and wanted is not None:
            _refuse_empty_selection(forms, target_snap, wanted, rev or "HEAD")
        touched = {p for p in set(head_snap) | set(target_snap) if head_snap.get(p) != target_snap.get(p)}
        reshaped = set()  # untouched files the new patterns show differently
        if wanted != current or patterns is not _KEEP:  # given patterns hold, whatever sparse.json said
            untouched = {p: ie for p, ie in index.entries.items() if p in forms and p not in touched}
            reshaped = {p for p, ie in untouched.items() if _shown(ie) != forms[p]}
        if not force:
            self._refuse_overwrites(index, head_snap, target_snap, touched | reshaped, forms)
        todo: dict[str, Entry] = {}
        for p, entry in target_snap.items():
            ie = index.entries.get(p)
            if p in touched or p in reshaped or (force and (ie is None or not self._holds(p, forms[p], index))):
                todo[p] = entry
        plan = Journal(
            "checkout", rev or create_branch or "HEAD", target,
            writes={p: Write(e, forms[p].entry, forms[p].written) for p, e in todo.items()},
            removes=[p for p in sorted(set(index.entries) - set(target_snap)) if p in head_snap or force],
            old_head=self.refs.head(), patterns=wanted, set_patterns=wanted != current,
        )  # fmt: skip
        if create_branch:
            plan.head, plan.branch = "create", create_branch
        elif rev in self.refs.branches():
            plan.head, plan.branch = "branch", rev
        elif rev != "HEAD":
            plan.head = "detach"
        result = CheckoutResult(target)
        self._write_files(index, todo, result, staged, forms, budget, plan)
        self._complete(plan, index, result)
        result.detached = self.refs.current_branch() is None
        return result

    def _complete(self, plan: Journal, index: Index, result: CheckoutResult, clear: bool = True) -> None:
        """The steps after the working files of a journaled operation are written: removals,
        the index, the sparse patterns, HEAD; then (``clear``) the journal goes (each step idempotent)."""
        for p in plan.removes:
            if index.entries.pop(p, None) is not None or (self.root / p).exists():
                result.removed.append(p)
            (self.root / p).unlink(missing_ok=True)
            _prune_dirs(self.root, p)
        index.save()
        if plan.set_patterns:
            save_patterns(self.git_dir, plan.patterns)
        self._move_head(plan)
        if clear:
            journal.clear(self.git_dir)

    def _move_head(self, plan: Journal) -> None:
        """HEAD as a journaled operation leaves it, whether or not a killed run got that far."""
        if plan.head in ("create", "branch"):
            assert plan.branch is not None
            if plan.head == "create" and plan.branch not in self.refs.branches():
                self.refs.create_branch(plan.branch, plan.target)
            if not plan.switch_after and self.refs.current_branch() != plan.branch:
                self.refs.point_head_at_branch(plan.branch)
        elif plan.head == "detach":
            if self.refs.current_branch() is not None or self.refs.head() != plan.target:
                self.refs.detach_head(plan.target)
        elif plan.head == "advance":
            head = self.refs.head()
            if head != plan.target:
                if head != plan.old_head:
                    raise RefUpdateError(f"HEAD moved to {str(head)[:12]} while the {plan.describe()} ran")
                self.refs.advance_head(plan.old_head, plan.target, plan.message)

    def _recover(self) -> None:
        """Finish the operation a killed or interrupted command left in the journal (run when
        the lock is taken). If it cannot be finished, say how to finish or undo it by hand."""
        plan = journal.load(self.git_dir)
        if plan is None:
            return
        warn(f"finishing the interrupted {plan.describe()}")
        try:
            self._finish(plan)
        except (MgitError, OSError) as exc:
            undo = f" or `{_undo_command(plan)}` to undo it" if plan.old_head else ""
            warn(
                f"could not finish the interrupted {plan.describe()} ({exc}); "
                f"run `{_finish_command(plan)}` to finish it{undo}"
            )

    def _finish(self, plan: Journal) -> None:
        """Roll a journaled operation forward: write what is not written yet, then complete it."""
        index = self._index()
        todo = {p: w.entry for p, w in plan.writes.items()}
        forms = {p: WorkForm(w.form, w.written) for p, w in plan.writes.items()}
        done = {p for p, form in forms.items() if form.written and self._holds(p, form, index)}
        for p in done:
            index.set(p, todo[p], os.stat(self.root / p), projection=forms[p].projection(todo[p]))
        result = CheckoutResult(plan.target)
        self._write_files(index, {p: e for p, e in todo.items() if p not in done}, result, forms=forms)
        self._complete(plan, index, result, clear=not plan.switch_after)
        if plan.switch_after:  # the journal stays until the switch's own journal replaces it
            assert plan.branch is not None
            try:
                self._switch(plan.branch, None, force=False)
            except MgitError:
                left = journal.load(self.git_dir)
                if left is not None and left.op == plan.op:  # refused before writing anything
                    journal.clear(self.git_dir)
                raise

    def _clean(self, rel: str, want: Entry, index: Index) -> bool:
        """Does the working file hold ``want`` (stat cache first, content if needed)? The
        stat cache vouches for what the file holds: its projection in a sparse checkout."""
        path = self.root / rel
        if not path.is_file():
            return False
        ie = index.entries.get(rel)
        if ie is not None and ie.worktree == want and ie.matches(os.stat(path)):
            return True
        return working_matches(self.graph, self.pool, path, rel, want)[0]

    def _holds(self, rel: str, form: WorkForm, index: Index) -> bool:
        """Does the working tree show ``form`` at ``rel`` (a file left out: no file there)?"""
        if not form.written:
            return not (self.root / rel).exists()
        return self._clean(rel, form.entry, index)

    def _refuse_overwrites(
        self, index: Index, head_snap: Snapshot, target_snap: Snapshot, touched: set[str], forms: dict[str, WorkForm]
    ) -> None:
        conflicts = []
        for p in sorted(touched):
            ie = index.entries.get(p)
            path = self.root / p
            if ie is None:
                if path.is_file() and p in target_snap and not self._holds(p, forms[p], index):
                    conflicts.append(p)  # untracked file in the way
                continue
            if ie.entry != head_snap.get(p):
                conflicts.append(p)  # staged change
            elif path.is_file() and not self._clean(p, ie.worktree, index):
                conflicts.append(p)  # unstaged change (a sparse file: against what was checked out)
        if conflicts:
            shown = ", ".join(conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
            left = journal.load(self.git_dir)
            if left is not None:  # the finishing failed (a warning said why)
                raise DirtyWorktreeError(
                    f"the interrupted {left.describe()} left {shown} half switched; run "
                    f"`{_finish_command(left)}` to finish it"
                )
            raise DirtyWorktreeError(
                f"checkout would overwrite uncommitted changes in {shown}; commit them, or use --force to discard them"
            )

    def _write_files(
        self,
        index: Index,
        todo: Mapping[str, Entry],
        result: CheckoutResult,
        staged: Mapping[str, StagedFile] | None = None,
        forms: Mapping[str, WorkForm] | None = None,
        budget: int | None = None,
        plan: Journal | None = None,
    ) -> None:
        """Write entries into the working tree, as ``forms`` show them (default: as the sparse
        patterns do); a staged file already holding an entry's bytes (a merge wrote it) is
        moved into place instead. With ``budget``, the cost is checked before anything is
        written (a partial clone fetches what it lacks first). ``plan`` is saved as the
        journal just before the first write (a refusal before it leaves none)."""
        if forms is None:
            patterns = load_patterns(self.git_dir)
            forms = {p: self._form(e, p, patterns) for p, e in todo.items()}
        staged = staged or {}
        for p in todo:
            if (self.root / p).is_dir():
                raise BadInputError(f"cannot write {p}: a directory is in the way")
        reuse = {p: self._reusable(index, p, forms[p]) for p in todo}
        if budget is not None:
            result.cost = self._within_budget(index, todo, forms, reuse, budget, result.commit)
        sizes = {p: entry_size(self.graph, forms[p].entry) for p in todo if forms[p].written}
        if plan is not None:
            journal.save(self.git_dir, plan)
        with byte_progress("checkout", sum(sizes.values())) as bar:
            for p in sorted(todo):
                entry, form, dest = todo[p], forms[p], self.root / p
                if not form.written:  # a sparse checkout selects none of its tensors
                    if dest.is_file():
                        dest.unlink()
                        _prune_dirs(self.root, p)
                    index.entries[p] = IndexEntry(entry, skip_worktree=True, projection=form.projection(entry))
                    result.left_out.append(p)
                    continue
                ready = staged.get(p)
                if ready is not None and ready.entry_oid == entry.oid and form.entry == entry:
                    index.set(p, entry, ready.install())
                    result.written.append(p)
                    bar.advance(sizes[p])
                    continue
                write_entry(self.graph, self.store, self.pool, form.entry, dest, p, reuse[p], bar)
                index.set(p, entry, os.stat(dest), projection=form.projection(entry))
                result.written.append(p)

    def _reusable(self, index: Index, rel: str, form: WorkForm) -> tuple[Path, LocalChunks] | None:
        """The local file to copy unchanged chunks from, with where its chunks lie (as the
        index says it was checked out)."""
        old, dest = index.entries.get(rel), self.root / rel
        if old is None or old.worktree.kind == "blob" or form.entry.kind == "blob" or not dest.is_file():
            return None
        return dest, local_chunks(self.graph, old.worktree)

    def _within_budget(
        self,
        index: Index,
        todo: Mapping[str, Entry],
        forms: Mapping[str, WorkForm],
        reuse: Mapping[str, tuple[Path, LocalChunks] | None],
        budget: int,
        commit: str | None = None,
    ) -> CheckoutCost:
        """Refuse a checkout over ``budget`` before it writes; in a partial clone, fetch what
        it lacks first (capped). Chunks count as local only in a file known to be clean, so
        the measured reads never exceed the price."""
        reads: list[str] = []
        for p in sorted(todo):
            form = forms[p]
            if not form.written:
                continue
            local = reuse[p][1] if reuse[p] is not None and self._clean(p, index.entries[p].worktree, index) else None
            reads += store_reads(self.graph, form.entry, p, local)
        promisor = self.promisor
        bases = (lambda wanted: self._recorded_parents(commit, wanted)) if commit else None
        quote = promisor.quote(reads, bases) if promisor is not None else None
        cost = estimate(reads, self.store.read_cost, quote)
        if cost.total > budget:
            raise BudgetExceededError(over_budget(cost, budget, promisor.remote if promisor is not None else None))
        if promisor is not None and quote is not None and quote.fetch:
            # a refused checkout keeps none of what it fetched
            cost = promisor.fetch_for_checkout(reads, quote, cost, budget, self.store.abort)
        return cost

    def _recorded_parents(self, start: str, wanted: set[str]) -> dict[str, str]:
        """For chunks in ``wanted``, the parent chunk a commit at or before ``start`` recorded
        them against (what ``add`` stores a changed chunk as a delta of, where smaller)."""
        found: dict[str, str] = {}
        walker = self.graph.repo.get_walker(include=[start.encode()], max_entries=PARENT_SEARCH_COMMITS)
        for entry in walker:
            for triples in self.commit_stats(entry.commit.id.decode()).values():
                found |= {cid: parent for cid, parent, _ in triples if cid in wanted}
            if len(found) == len(wanted):
                break
        return found

    # -- tensors from Python ------------------------------------------------------------

    def models(self, rev: str = "HEAD") -> dict[str, list[str]]:
        """Model directory ('' is the root) → its safetensors files, in a revision."""
        return _models(self.snapshot(rev))

    def _pick_model(self, snap: Snapshot, model: str | None) -> tuple[str, list[str]]:
        models = _models(snap)
        if model is not None:
            key = self.relpath(model)
            if key not in models:
                raise BadInputError(f"no model (safetensors files) in directory {model!r}")
            return key, models[key]
        if len(models) != 1:
            if not models:
                raise BadInputError("this revision holds no safetensors model")
            names = ", ".join(m or "." for m in models)
            raise BadInputError(f"this revision holds several models ({names}); choose one with model=/--model")
        return next(iter(models.items()))

    @on_demand
    def state_dict(
        self, rev: str = "HEAD", names: Iterable[str] | None = None, model: str | None = None
    ) -> dict[str, torch.Tensor]:
        """Tensors of a model at ``rev``; reads only the chunks of the requested tensors."""
        from mgit.model.torch_io import tensor_from_bytes

        snap = self.snapshot(rev)
        _, files = self._pick_model(snap, model)
        where: dict[str, tuple[str, object]] = {}
        for path in files:
            stored = load_safetensors(self.graph, snap[path].oid, path)
            for name, manifest in stored.manifests.items():
                where[name] = (path, manifest)
        wanted = list(where) if names is None else list(names)
        missing = [n for n in wanted if n not in where]
        if missing:
            raise BadInputError(f"tensor(s) not in this model: {', '.join(missing[:5])}")
        out = {}
        for name in wanted:
            path, manifest = where[name]
            what = f"tensor {name!r} in {path}"
            buf = bytearray(manifest.nbytes)
            offset = 0
            for data in ordered_map(self.pool, lambda c, w=what: self.store.get(c.id, w), manifest.chunks):
                buf[offset : offset + len(data)] = data
                offset += len(data)
            out[name] = tensor_from_bytes(buf, manifest.dtype, manifest.shape)
        return out

    def commit_state_dict(
        self,
        state_dict: Mapping[str, torch.Tensor],
        model: str = "model",
        message: str = "",
        metadata: dict[str, str] | None = None,
        base: str | None = None,
        branch: str | None = None,
    ) -> str:
        """Commit tensors straight from memory as the model in directory ``model``, on
        ``branch`` (default: HEAD, the checked-out branch or a detached HEAD).

        Tensors keep the shard file they had before (new ones go to the single file, or the
        last shard). On the checked-out branch, the model files that are in the working tree
        are rewritten to match (atomically, as a checkout writes them) and the index follows,
        so status is clean and a later plain ``add`` + ``commit`` keeps the checkpoint; files
        absent from disk stay not checked out. Uncommitted changes in those files are refused
        first. On another branch, the working tree and index are left as they are. Changed
        tensors are delta-encoded against ``base`` (default: the branch's tip).
        """
        if not message.strip():
            raise BadInputError("empty commit message")
        for name in state_dict:
            if not isinstance(name, str):
                raise BadInputError(f"tensor names must be strings, got {name!r}")
        with self._writing():
            checked_out = branch is None or branch == self.refs.current_branch()
            if checked_out:
                tip = self.refs.head()
            elif branch in self.refs.branches():
                tip = self.refs.branches()[branch]
            else:
                raise BadInputError(f"branch {branch!r} not found; create it first with `mgit branch {branch}`")
            before = read_snapshot(self.graph, self.graph.commit(tip).tree) if tip else {}
            snap, stats = self._ingest_state_dict(state_dict, dict(before), self.relpath(model), metadata, base)
            touched = {p for p in set(before) | set(snap) if before.get(p) != snap.get(p)}
            if tip and not touched:  # compared as files, not trees: the tree also holds its stats record
                raise MgitError("nothing to commit: these tensors are what the branch holds already")
            index = self._index() if checked_out else None
            if index is not None:
                self._refuse_state_dict_overwrites(index, before, touched)
            self.store.seal()
            tree = write_snapshot(self.graph, snap, records.stats_entries(self.graph, stats))
            commit = self._new_commit(tree, tip, message)
            summary = f"{'commit' if tip else 'commit (initial)'}: {message.strip().splitlines()[0]}"
            if index is None:
                assert branch is not None
                self.refs.advance_branch(branch, tip, commit, summary)
                return commit
            # working files and index first, the branch last: a failure in between leaves the
            # checkpoint staged (never a stale file that a later commit would take back); journaled,
            # so a killed run's working files, index and branch are finished by the next command
            plan = Journal("commit", "tensors from memory", commit, head="advance", old_head=tip, message=summary)
            result = self._follow_state_dict(index, commit, snap, touched, plan)
            self._complete(plan, index, result)
            return commit

    def _ingest_state_dict(
        self,
        state_dict: Mapping[str, torch.Tensor],
        snap: Snapshot,
        model_dir: str,
        metadata: dict[str, str] | None,
        base: str | None,
    ) -> tuple[Snapshot, dict[str, list]]:
        """Store the tensors as the safetensors files of ``model_dir`` in ``snap`` (changed in
        place and returned, with each file's relative statistics)."""
        from mgit.model.torch_io import dtype_name, tensor_bytes

        parents = self._parent_lookup(self.snapshot(base) if base else snap)
        old_files = _models(snap).get(model_dir, [])
        assignment: dict[str, list[str]] = {p: [] for p in old_files}
        old_home = {}
        for path in old_files:
            for name in load_safetensors(self.graph, snap[path].oid, path).manifests:
                old_home[name] = path
        default = old_files[-1] if old_files else posixpath.join(model_dir, "model.safetensors")
        for name in sorted(state_dict):
            assignment.setdefault(old_home.get(name, default), []).append(name)
        total = sum(t.numel() * t.element_size() for t in state_dict.values())
        stats = {}
        with byte_progress("commit", total) as bar:
            ingestor = Ingestor(self.graph, self.store, self.pool, bar, parents)
            for path, names in assignment.items():
                if not names:
                    snap.pop(path, None)
                    continue
                ingestor.begin_file(path)
                meta = metadata
                if meta is None and path in old_files:
                    meta = load_safetensors(self.graph, snap[path].oid, path).layout.metadata
                specs, ids = [], {}
                for name in names:
                    t = state_dict[name]
                    dtype = lookup(dtype_name(t.dtype))
                    raw = tensor_bytes(t)
                    specs.append((name, dtype, tuple(t.shape)))
                    read = lambda o, n, r=raw: r[o : o + n]  # noqa: E731
                    ids[name] = ingestor.tensor(name, dtype, tuple(t.shape), len(raw), read)
                tree = ingestor.safetensors_tree(build_header(specs, meta), ids)
                snap[path] = Entry("safetensors", tree)
                stats[path] = ingestor.file_stats
        self._update_shard_index(snap, model_dir, assignment, total)
        return snap, stats

    def _refuse_state_dict_overwrites(self, index: Index, before: Snapshot, touched: set[str]) -> None:
        """Uncommitted changes in the files a commit from memory rewrites would be lost: refuse."""
        dirty = []
        for p in sorted(touched):
            ie, path = index.entries.get(p), self.root / p
            if ie is None:
                if path.exists():
                    dirty.append(p)  # an untracked file where the commit puts one
            elif ie.entry != before.get(p) or (path.is_file() and not self._clean(p, ie.worktree, index)):
                dirty.append(p)
        if dirty:
            shown = ", ".join(dirty[:5]) + (f" and {len(dirty) - 5} more" if len(dirty) > 5 else "")
            raise DirtyWorktreeError(
                f"committing tensors from memory would overwrite uncommitted changes in {shown}; "
                "commit or discard them first (nothing was committed)"
            )

    def _follow_state_dict(
        self, index: Index, commit: str, snap: Snapshot, touched: set[str], plan: Journal
    ) -> CheckoutResult:
        """Bring the working files and index of ``touched`` paths to ``snap`` (known clean):
        files on disk are written as a checkout writes them, absent ones stay not checked out.
        ``plan`` (the journal) gets every step and is saved before the first change on disk."""
        patterns = load_patterns(self.git_dir)
        todo: dict[str, Entry] = {}
        forms: dict[str, WorkForm] = {}
        for p in sorted(touched):
            ie, path = index.entries.get(p), self.root / p
            if p not in snap:  # a shard left without tensors
                plan.removes.append(p)
                continue
            entry = snap[p]
            form = forms[p] = self._form(entry, p, patterns)
            if ie is not None and _shown(ie) == form and not ie.skip_worktree:
                # the working file already shows it (a sparse file: a left-out tensor changed)
                index.entries[p] = replace(ie, entry=entry, stats=None, projection=form.projection(entry))
                plan.writes[p] = Write(entry, form.entry)  # a recovery finds it written
            elif path.is_file():
                todo[p] = entry
                plan.writes[p] = Write(entry, form.entry)
            else:
                index.entries[p] = IndexEntry(entry, skip_worktree=True, projection=form.projection(entry))
                plan.writes[p] = Write(entry, form.entry, written=False)
        result = CheckoutResult(commit)
        self._write_files(index, todo, result, forms=forms, plan=plan)
        return result

    def _new_commit(self, tree: str, parent: str | None, message: str) -> str:
        """A commit object of ``tree`` on ``parent`` (the caller refused a commit of nothing)."""
        who = self.identity()
        return self.graph.put_commit(tree, [parent] if parent else [], message, who, who)

    def _update_shard_index(
        self, snap: Snapshot, model_dir: str, assignment: dict[str, list[str]], total_size: int
    ) -> None:
        """Rewrite a sharded model's index.json weight_map to match the new assignment."""
        path = posixpath.join(model_dir, "model.safetensors.index.json")
        if path not in snap:
            return
        try:
            doc = json.loads(self.graph.blob(snap[path].oid))
        except (ValueError, RecursionError):
            return
        if not isinstance(doc, dict):
            return
        doc["weight_map"] = {
            name: posixpath.relpath(file, model_dir or ".") for file, names in assignment.items() for name in names
        }
        if isinstance(doc.get("metadata"), dict) and "total_size" in doc["metadata"]:
            doc["metadata"]["total_size"] = total_size
        blob = json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"
        snap[path] = Entry("blob", self.graph.put_blob(blob), snap[path].mode)


def _refuse_special(paths: list[str]) -> None:
    """A path named or tracked that is no regular file is refused (reading a FIFO blocks)."""
    if paths:
        raise BadInputError(
            f"cannot add {paths[0]}: not a regular file (a FIFO, socket or device); "
            "mgit tracks regular files and symlinks to them"
        )


def _unchanged_since(path: Path, rel: str, seen: os.stat_result) -> os.stat_result:
    """The file's stat after ``add`` read it; a file rewritten, replaced or touched since
    ``seen`` (its stat before the read) may have been read as a mix of two versions: refused."""
    try:
        after = os.stat(path)
    except OSError:
        after = None
    if after is None or StatKey.of(after) != StatKey.of(seen):
        raise BadInputError(
            f"{rel} changed while mgit was reading it; nothing was staged. Run `mgit add` again once it is written"
        )
    return after


def _shown(ie: IndexEntry) -> WorkForm:
    """How the index says the working tree shows an entry now."""
    return WorkForm(ie.worktree, not ie.skip_worktree)


def _finish_command(plan: Journal) -> str:
    """The command that finishes a journaled operation by hand, leaving HEAD where the
    operation would: on its branch, on the advanced branch, or detached."""
    if plan.head in ("branch", "create"):
        return f"mgit checkout --force {plan.branch}"
    if plan.head == "advance":
        return f"mgit reset --hard {plan.target[:12]}"
    if plan.head == "detach":
        return f"mgit checkout --force {plan.target[:12]}"
    return "mgit checkout --force HEAD"


def _undo_command(plan: Journal) -> str:
    """The command that undoes a journaled operation by hand (``plan.old_head`` is set)."""
    assert plan.old_head is not None
    if plan.head == "advance":
        return f"mgit reset --hard {plan.old_head[:12]}"
    return f"mgit checkout --force {plan.old_head[:12]}"


def _refuse_empty_selection(forms: Mapping[str, WorkForm], snap: Snapshot, patterns: SparsePatterns, rev: str) -> None:
    """New patterns that select no tensor of a revision holding tensors are surely a typo:
    refuse them rather than empty the working tree of every model."""
    tensor_files = [p for p, e in snap.items() if e.kind == "safetensors"]
    if tensor_files and not any(forms[p].written for p in tensor_files):
        raise BadInputError(f"no tensor of {rev} matches {patterns.describe()}; nothing would be checked out")


def _models(snap: Snapshot) -> dict[str, list[str]]:
    models: dict[str, list[str]] = {}
    for path, entry in sorted(snap.items()):
        if entry.kind == "safetensors":
            models.setdefault(posixpath.dirname(path), []).append(path)
    return models


def _under(paths: Iterable[str], rel: str) -> list[str]:
    """The paths at or below ``rel`` ('' is the root)."""
    return [p for p in paths if not rel or p == rel or p.startswith(rel + "/")]


def _prune_dirs(root: Path, rel: str) -> None:
    """Remove directories left empty by deleting ``rel``."""
    parent = (root / rel).parent
    while parent != root:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent


__all__ = ["Repository", "RevisionError"]
