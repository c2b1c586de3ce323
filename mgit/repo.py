"""Repository: mgit's Python API, a thin facade. Each method is one call into mgit.ops, over
the repository's :class:`~mgit.context.Context` (``self.ctx``); merges and remotes are still
the Merging and Sync mixins. Paths given to its methods are absolute or relative to the
repository root.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mgit.budget import Budget
from mgit.context import FORMAT_VERSION, Context
from mgit.context import find_root as _find_root  # noqa: F401  (the cli imports it from here)
from mgit.errors import RevisionError
from mgit.graph.objects import CommitInfo, Graph
from mgit.graph.refs import Refs
from mgit.graph.snapshot import Entry, Snapshot
from mgit.lock import RepoLock
from mgit.maintenance.du import StoreUsage, Usage
from mgit.maintenance.gc import DEFAULT_GRACE_SECONDS, GcReport
from mgit.merging import Merging
from mgit.model.materialize import StagedFile
from mgit.ops import checkout, inspect, maintain, recover, refs, reset, stage, workfiles
from mgit.ops.checkout import KEEP
from mgit.ops.inspect import FileInfo, ShowInfo
from mgit.ops.maintain import Repair
from mgit.ops.reset import RESET_MODES, ResetResult
from mgit.ops.stage import AddResult
from mgit.ops.workfiles import CheckoutResult, WorkForm
from mgit.remote.promisor import Promisor
from mgit.remote.transfer import Transfer
from mgit.store.chunkstore import ChunkStore
from mgit.sync import Sync
from mgit.worktree.index import Index
from mgit.worktree.journal import Journal
from mgit.worktree.sparse import SparsePatterns, load_patterns
from mgit.worktree.status import Status

if TYPE_CHECKING:
    import torch

    from mgit.diff.model import ModelDiff


class Repository(Merging, Sync):
    """An mgit repository: ``.mgit/`` (git graph + chunk store) beside a working tree."""

    def __init__(self, path: str | os.PathLike[str] = "."):
        self.ctx = Context(path, on_lock=recover.recover)
        self.ctx.remote = self
        self.ctx.promisor = self._open_promisor()

    @classmethod
    def init(cls, path: str | os.PathLike[str] = ".") -> Repository:
        root = Path(path).resolve()
        Context.create(root)
        repo = cls(root)
        repo.ctx.set_format(FORMAT_VERSION)
        return repo

    def close(self) -> None:
        self.ctx.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the plumbing, as the mixins, the cli and scripts use it -------------------------

    @property
    def root(self) -> Path:
        """The working tree's root."""
        return self.ctx.root

    @property
    def git_dir(self) -> Path:
        """``.mgit/``: the graph, the chunk store, the index."""
        return self.ctx.git_dir

    @property
    def graph(self) -> Graph:
        return self.ctx.graph

    @property
    def store(self) -> ChunkStore:
        return self.ctx.store

    @property
    def lock(self) -> RepoLock:
        return self.ctx.lock

    @property
    def refs(self) -> Refs:
        return self.ctx.refs

    @property
    def format(self) -> int:
        return self.ctx.format

    @property
    def pool(self) -> ThreadPoolExecutor:
        return self.ctx.pool

    @property
    def promisor(self) -> Promisor | None:
        """A partial clone's source of chunks not here (None: not a partial clone)."""
        return self.ctx.promisor

    @promisor.setter
    def promisor(self, value: Promisor | None) -> None:
        self.ctx.promisor = value

    @property
    def cloned(self) -> Transfer:
        """What clone() received (empty unless this object made the clone)."""
        return self.ctx.cloned

    @cloned.setter
    def cloned(self, value: Transfer) -> None:
        self.ctx.cloned = value

    def identity(self) -> bytes:
        """GIT_AUTHOR_NAME/EMAIL, else user.name/email from .mgit/config or git's config, else the system."""
        return self.ctx.identity()

    def config_set(self, key: str, value: str) -> None:
        self.ctx.config_set(key, value)

    def config_get(self, key: str) -> str | None:
        return self.ctx.config_get(key)

    def relpath(self, path: str | os.PathLike[str]) -> str:
        """Repository-relative posix path ('' for the root); refuses paths outside."""
        return self.ctx.relpath(path)

    def snapshot(self, rev: str = "HEAD") -> Snapshot:
        """Path → Entry for every file of a revision."""
        return self.ctx.snapshot(rev)

    def resolve(self, rev: str) -> str:
        return self.ctx.resolve(rev)

    # -- what the Merging and Sync mixins use (until they move to mgit.ops) ---------------

    def _writing(self) -> AbstractContextManager[None]:
        return self.ctx.writing()

    def _index(self) -> Index:
        return self.ctx.index()

    def _parent_lookup(self, snap: Snapshot) -> Callable[[str], dict[str, Any]]:
        return stage.parent_lookup(self.ctx, snap)

    def _pick_model(self, snap: Snapshot, model: str | None) -> tuple[str, list[str]]:
        return inspect.pick_model(self.ctx, snap, model)

    def _refuse_dirty(self, what: str) -> None:
        inspect.refuse_dirty(self.ctx, what)

    def _form(self, entry: Entry, rel: str, patterns: SparsePatterns | None) -> WorkForm:
        return workfiles.form(self.ctx, entry, rel, patterns)

    def _switch(
        self, rev: str | None, create_branch: str | None, force: bool,
        staged: Mapping[str, StagedFile] | None = None, patterns: SparsePatterns | None | object = KEEP,
    ) -> CheckoutResult:  # fmt: skip
        return checkout.switch(self.ctx, rev, create_branch, force, staged, patterns)

    def _write_files(
        self, index: Index, todo: Mapping[str, Entry], result: CheckoutResult,
        staged: Mapping[str, StagedFile] | None = None, forms: Mapping[str, WorkForm] | None = None,
    ) -> None:  # fmt: skip
        checkout.write_files(self.ctx, index, todo, result, staged, forms)

    def _complete(self, plan: Journal, index: Index, result: CheckoutResult) -> None:
        workfiles.complete(self.ctx, plan, index, result)

    # -- add / rm / commit --------------------------------------------------------------

    def add(self, paths: Iterable[str | os.PathLike[str]] = (".",), base: str | None = None) -> AddResult:
        """Mirror the given paths into the index: new, changed and deleted files.

        Changed tensors are delta-encoded against the same tensors in ``base`` (default
        HEAD) where that is smaller, and their per-chunk change norms are recorded.
        """
        return stage.add(self.ctx, paths, base)

    def rm(self, paths: Iterable[str | os.PathLike[str]], cached: bool = False) -> list[str]:
        """Stop tracking paths; delete the working files too unless ``cached``."""
        return stage.rm(self.ctx, paths, cached)

    def commit(self, message: str, allow_empty: bool = False) -> str:
        """Commit the index; the current branch moves last, by compare-and-swap."""
        return stage.commit(self.ctx, message, allow_empty)

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
        return stage.commit_state_dict(self.ctx, state_dict, model, message, metadata, base, branch)

    # -- status / log / show / diff / tensors --------------------------------------------

    def status(self) -> Status:
        return inspect.status(self.ctx)

    def log(self, rev: str = "HEAD", paths: Iterable[str] = (), max_count: int | None = None) -> list[CommitInfo]:
        """Commits reachable from ``rev``, newest first; ``paths`` limits to commits touching them."""
        return inspect.log(self.ctx, rev, paths, max_count)

    def show(self, rev: str = "HEAD") -> ShowInfo:
        return inspect.show(self.ctx, rev)

    def commit_stats(self, rev: str = "HEAD") -> dict[str, list[Any]]:
        """path → [[chunk id, parent chunk id, ‖Δ‖₂], ...] recorded with a commit."""
        return inspect.commit_stats(self.ctx, rev)

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
        with self.ctx.reading():
            return inspect.diff(self.ctx, a, b, staged=staged, numeric=numeric, patterns=patterns, model=model)

    def models(self, rev: str = "HEAD") -> dict[str, list[str]]:
        """Model directory ('' is the root) → its safetensors files, in a revision."""
        return inspect.models(self.ctx, rev)

    def state_dict(
        self, rev: str = "HEAD", names: Iterable[str] | None = None, model: str | None = None
    ) -> dict[str, torch.Tensor]:
        """Tensors of a model at ``rev``; reads only the chunks of the requested tensors."""
        with self.ctx.reading():
            return inspect.state_dict(self.ctx, rev, names, model)

    # -- checkout / reset ---------------------------------------------------------------

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
        with self.ctx.reading():
            return checkout.checkout(
                self.ctx, rev, paths, create_branch=create_branch, force=force,
                include=include, exclude=exclude, full=full, budget=budget,
            )  # fmt: skip

    def sparse_patterns(self) -> SparsePatterns | None:
        """The patterns of a sparse checkout (None: the checkout is full)."""
        return load_patterns(self.ctx.git_dir)

    def reset(
        self, rev: str = "HEAD", mode: str = "mixed", paths: Iterable[str | os.PathLike[str]] | None = None
    ) -> ResetResult:
        """Move the current branch (or a detached HEAD) to ``rev``, as git's reset: ``soft``
        keeps the index and the working tree, ``mixed`` makes the index ``rev``'s and keeps the
        working files (they show as modified), ``hard`` makes both ``rev``'s (written by the
        checkout machinery). Without ``hard``, staged changes held by no commit and no working
        file are never dropped. ``paths`` (``reset REV -- PATH``): only their index entries
        become ``rev``'s; HEAD and the working files stay."""
        with self.ctx.reading():
            return reset.reset(self.ctx, rev, mode, paths)

    # -- branches, tags, reflogs --------------------------------------------------------

    def branches(self) -> dict[str, str]:
        return self.ctx.refs.branches()

    def create_branch(self, name: str, rev: str = "HEAD", force: bool = False) -> None:
        """Create branch ``name`` at ``rev``; ``force`` moves an existing one there (not the
        checked-out branch, unless it already is at ``rev``: that is what ``reset`` is for)."""
        refs.create_branch(self.ctx, name, rev, force)

    def delete_branch(self, name: str, force: bool = True) -> None:
        """Delete a branch; ``force=False`` refuses one not merged into HEAD or its upstream
        (``mgit branch -d``; ``-D`` forces)."""
        refs.delete_branch(self.ctx, name, force)

    def rename_branch(self, old: str, new: str, force: bool = False) -> None:
        """Rename a branch with its reflog; HEAD follows when it is the current one. ``force``
        (``branch -M``) replaces a branch ``new`` that exists, as git does."""
        refs.rename_branch(self.ctx, old, new, force)

    def remote_branches(self) -> dict[str, str]:
        """Remote-tracking branches (``origin/main`` → commit), as fetch and push left them."""
        return self.ctx.refs.remote_branches()

    def tags(self) -> dict[str, str]:
        return self.ctx.refs.tags()

    def tag(self, name: str, rev: str = "HEAD") -> None:
        refs.tag(self.ctx, name, rev)

    def delete_tag(self, name: str) -> None:
        refs.delete_tag(self.ctx, name)

    def reflog_ref(self, ref: str = "HEAD") -> str:
        """The full ref whose reflog ``reflog(ref)`` reads (``origin/main`` → refs/remotes/origin/main)."""
        return refs.reflog_ref(self.ctx, ref)

    def reflog(self, ref: str = "HEAD") -> list[tuple[str, str, int, str]]:
        """(old id or "", new id, time, message) of each move of ``ref``, newest first; empty
        for a tag (tags keep no reflog, as in git)."""
        return refs.reflog(self.ctx, ref)

    def reflog_expire(self, days: float | None = 90) -> int:
        """Forget reflog entries older than ``days`` (None: all); returns how many. What only
        they kept alive (commits of deleted branches, amended history) gc may then reclaim."""
        return maintain.reflog_expire(self.ctx, days)

    # -- maintenance --------------------------------------------------------------------

    def gc(self, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> GcReport:
        """Remove what no ref, reflog entry or the index reaches (older than the grace period)."""
        return maintain.gc(self.ctx, grace_seconds)

    def fsck(self) -> list[str]:
        """Every problem found, one line each (empty: the repository is whole). In a partial
        clone, chunks not fetched yet are not problems."""
        return maintain.fsck(self.ctx)

    def fsck_repair(self) -> Repair:
        """Restore damaged or missing git objects and refs, rewrite damaged packs, and store
        again every chunk the history needs and lacks, from the working tree and the remotes
        (see :func:`mgit.ops.maintain.fsck_repair`)."""
        return maintain.fsck_repair(self.ctx)

    def leftovers(self) -> list[str]:
        """Temporary files a killed command left in ``.mgit`` (a killed ``fsck --repair``'s
        objects, say): not damage, nothing reads them; gc removes them after its grace period."""
        return maintain.leftovers(self.ctx)

    def du(self, rev: str = "HEAD") -> Usage:
        return maintain.du(self.ctx, rev)

    def store_usage(self) -> StoreUsage:
        return maintain.store_usage(self.ctx)


__all__ = [
    "RESET_MODES",
    "AddResult",
    "CheckoutResult",
    "FileInfo",
    "Repair",
    "Repository",
    "ResetResult",
    "RevisionError",
    "ShowInfo",
]
