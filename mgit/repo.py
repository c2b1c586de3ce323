"""Repository: mgit's Python API, a thin facade over mgit.ops. Each method is one operation
called on the repository's :class:`~mgit.context.Context` (``self.ctx``); its signature and
its docstring are the operation's (docs/guide.md is the guide). Paths given to its methods
are absolute or relative to the repository root.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mgit.errors import RevisionError
from mgit.facade import forward, forward_reading
from mgit.lazy import lazy_module

if TYPE_CHECKING:
    from concurrent.futures import ThreadPoolExecutor

    # the type checker sees each module of operations as an attribute of _ops once imported
    import mgit.ops.ancestry  # noqa: F401
    import mgit.ops.branch_merge  # noqa: F401
    import mgit.ops.checkout  # noqa: F401
    import mgit.ops.history  # noqa: F401
    import mgit.ops.inspect  # noqa: F401
    import mgit.ops.lineage  # noqa: F401
    import mgit.ops.maintain  # noqa: F401
    import mgit.ops.merge  # noqa: F401
    import mgit.ops.move  # noqa: F401
    import mgit.ops.opening  # noqa: F401
    import mgit.ops.refs  # noqa: F401
    import mgit.ops.remotes  # noqa: F401
    import mgit.ops.reset  # noqa: F401
    import mgit.ops.sketch  # noqa: F401
    import mgit.ops.stage  # noqa: F401
    import mgit.ops.stash  # noqa: F401
    import mgit.ops.switching  # noqa: F401
    import mgit.ops.sync  # noqa: F401
    import mgit.ops.verify_merge  # noqa: F401
    from mgit import context as _context
    from mgit import ops as _ops
    from mgit.context import Context
    from mgit.graph.objects import Graph
    from mgit.graph.refs import Refs
    from mgit.graph.snapshot import Snapshot
    from mgit.lock import RepoLock
    from mgit.ops.history import LogGraph
    from mgit.ops.inspect import FileInfo, ShowInfo
    from mgit.ops.maintain import Repair
    from mgit.ops.reset import RESET_MODES, ResetResult
    from mgit.ops.stage import AddResult
    from mgit.ops.sync import Pulled
    from mgit.ops.threeway import BranchMerge
    from mgit.ops.workfiles import CheckoutResult
    from mgit.remote.backend import Backend
    from mgit.remote.promisor import Promisor
    from mgit.remote.transfer import Transfer
    from mgit.store.chunkstore import ChunkStore
    from mgit.worktree.index import Index
    from mgit.worktree.sparse import SparsePatterns
else:  # each operation's module is imported when one of its methods is first used (mgit.lazy)
    _ops, _context = lazy_module("mgit.ops"), lazy_module("mgit.context")

# The result types scripts import from here, each from its operation's module when first asked for.
_RESULT_TYPES = {
    "AddResult": "mgit.ops.stage",
    "BranchMerge": "mgit.ops.threeway",
    "CheckoutResult": "mgit.ops.workfiles",
    "FileInfo": "mgit.ops.inspect",
    "LogGraph": "mgit.ops.history",
    "MergeVerification": "mgit.ops.verify_merge",
    "Pulled": "mgit.ops.sync",
    "Repair": "mgit.ops.maintain",
    "ResetResult": "mgit.ops.reset",
    "ShowInfo": "mgit.ops.inspect",
    "RESET_MODES": "mgit.ops.reset",
}


def __getattr__(name: str) -> Any:
    if name in _RESULT_TYPES:
        return getattr(importlib.import_module(_RESULT_TYPES[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class Repository:
    """An mgit repository: ``.mgit/`` (git graph + chunk store) beside a working tree."""

    def __init__(self, path: str | os.PathLike[str] = "."):
        """Open the repository holding ``path`` (it or a directory above it), as git finds one.

        Args:
            path: A directory in the working tree (default: the current one).

        Raises:
            NotARepositoryError: No ``.mgit/`` at ``path`` or above it, or one in a format
                this mgit cannot read.
        """
        self.ctx: Context = _ops.opening.open_repository(path)

    @classmethod
    def _of(cls, ctx: Context) -> Repository:
        """The facade of a context an operation opened (init, clone)."""
        repo = cls.__new__(cls)
        repo.ctx = ctx
        return repo

    @classmethod
    def init(cls, path: str | os.PathLike[str] = ".") -> Repository:
        """Create a new, empty repository, as ``git init`` does.

        Args:
            path: Its root (created if missing).

        Returns:
            The new repository, open.

        Raises:
            BadInputError: ``path`` is a repository already.
        """
        return cls._of(_ops.opening.init(path))

    @classmethod
    def clone(
        cls,
        url: str,
        path: str | os.PathLike[str],
        partial: bool = False,
        branch: str | None = None,
        token_file: str | None = None,
        include: Iterable[str] = (),
        exclude: Iterable[str] = (),
        budget: str | int | None = None,
    ) -> Repository:
        """Clone a remote into a new repository: every branch fetched, one checked out.

        Args:
            url: A directory (a remote's, or another repository), an ``http(s)://`` or ``s3://``
                URL; it becomes ``origin``.
            path: The new repository's root (missing or empty).
            partial: Fetch the graph only; chunks come when a command needs them.
            branch: The branch to check out (default: the remote's HEAD).
            token_file: A file holding the bearer token for an HTTP remote.
            include: fnmatch patterns on tensor names: a sparse checkout (a partial clone then
                fetches only these tensors' chunks).
            exclude: fnmatch patterns on tensor names left out.
            budget: The most bytes (``"2GB"``) the checkout may read and fetch (``partial`` only).

        Returns:
            The new repository, open (``cloned`` holds what was received).

        Raises:
            BadInputError: ``path`` is not empty, or a budget without ``partial``.
            RemoteError: The remote cannot be reached or lacks ``branch``.
            BudgetExceededError: The checkout would read and fetch more than ``budget``
                (no clone is left).
        """
        return cls._of(_ops.sync.clone(url, path, partial, branch, token_file, include, exclude, budget))

    def close(self) -> None:
        """Release the repository: its chunk store and thread pool."""
        self.ctx.close()

    def __enter__(self) -> Repository:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- the plumbing, as the cli, tests and scripts use it ------------------------------

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

    @property
    def is_partial(self) -> bool:
        """A partial clone: chunks may be missing here and are fetched when needed."""
        return self.ctx.is_partial

    @property
    def fetched(self) -> Transfer:
        """What this object's reads fetched on demand (a partial clone's; empty in a full clone)."""
        return self.ctx.fetched

    identity = forward(lambda: _context.Context.identity)
    config_set = forward(lambda: _context.Context.config_set)
    config_get = forward(lambda: _context.Context.config_get)
    config_list = forward(lambda: _context.Context.config_list)

    def relpath(self, path: str | os.PathLike[str]) -> str:
        """A path as the repository names it.

        Args:
            path: Absolute, or relative to the repository root.

        Returns:
            The repository-relative posix path (``''`` for the root).

        Raises:
            BadInputError: A path outside the repository.
        """
        return self.ctx.relpath(path)

    def snapshot(self, rev: str = "HEAD") -> Snapshot:
        """Every file of a revision, as stored (no data read).

        Args:
            rev: The revision.

        Returns:
            Path → Entry (kind, object id, mode).

        Raises:
            RevisionError: ``rev`` names no commit.
        """
        return self.ctx.snapshot(rev)

    def resolve(self, rev: str) -> str:
        """The commit a revision names, as ``git rev-parse`` resolves it.

        Args:
            rev: A branch, tag, commit id or prefix, ``HEAD~2``, ``main@{1}``, ….

        Returns:
            The commit's full id.

        Raises:
            RevisionError: ``rev`` names no commit.
        """
        return self.ctx.resolve(rev)

    def _index(self) -> Index:
        """The index as it is on disk (tests and scripts look into it)."""
        return self.ctx.index()

    def _backend(self, name: str, create: bool = False) -> Backend:
        """Remote ``name``'s backend, opened (tests and scripts look into remotes with it)."""
        return _ops.remotes.backend(self.ctx, name, create)

    def sparse_patterns(self) -> SparsePatterns | None:
        """The patterns of a sparse checkout (None: the checkout is full)."""
        from mgit.worktree.sparse import load_patterns

        return load_patterns(self.ctx.git_dir)

    def branches(self) -> dict[str, str]:
        """Local branch → the commit it points at."""
        return self.ctx.refs.branches()

    def remote_branches(self) -> dict[str, str]:
        """Remote-tracking branches (``origin/main`` → commit), as fetch and push left them."""
        return self.ctx.refs.remote_branches()

    def tags(self) -> dict[str, str]:
        """Tag → the commit it names (an annotated tag peeled to its commit)."""
        return self.ctx.refs.tags()

    @staticmethod
    def tracking_ref(remote: str, ref: str) -> str | None:
        """The local ref a remote's ref is kept as (:func:`mgit.ops.remotes.tracking_ref`).

        Args:
            remote: The remote's name.
            ref: A full ref of the remote.

        Returns:
            A branch's remote-tracking ref, a tag's local tag; None for anything else.
        """
        return _ops.remotes.tracking_ref(remote, ref)

    # -- the operations (mgit.ops): one line each ------------------------------------------

    add = forward(lambda: _ops.stage.add)
    rm = forward(lambda: _ops.stage.rm)
    mv = forward(lambda: _ops.move.mv)
    commit = forward(lambda: _ops.stage.commit)
    commit_state_dict = forward(lambda: _ops.stage.commit_state_dict)
    stash = forward(lambda: _ops.stash.stash)
    stash_list = forward(lambda: _ops.stash.stash_list)
    stash_apply = forward_reading(lambda: _ops.stash.stash_apply)
    stash_pop = forward_reading(lambda: _ops.stash.stash_pop)
    stash_drop = forward(lambda: _ops.stash.stash_drop)

    status = forward(lambda: _ops.inspect.status)
    log = forward(lambda: _ops.history.log)
    log_graph = forward(lambda: _ops.history.log_graph)
    show = forward(lambda: _ops.inspect.show)
    changes = forward(lambda: _ops.inspect.changes)
    commit_stats = forward(lambda: _ops.inspect.commit_stats)
    diff = forward_reading(lambda: _ops.inspect.diff)
    models = forward(lambda: _ops.inspect.models)
    state_dict = forward_reading(lambda: _ops.inspect.state_dict)

    checkout = forward_reading(lambda: _ops.checkout.checkout)
    reset = forward_reading(lambda: _ops.reset.reset)
    switch = forward_reading(lambda: _ops.switching.switch)
    restore = forward_reading(lambda: _ops.switching.restore)

    merge = forward(lambda: _ops.merge.merge)
    merge_plan = forward(lambda: _ops.merge.merge_plan)
    # merge and merge_plan of a request built whole (mgit.merge.request.MergeRequest), as `mgit merge` builds it
    _merge_with = forward(lambda: _ops.merge.merge_with)
    _plan_with = forward(lambda: _ops.merge.plan_with)
    merge_check = forward(lambda: _ops.merge.merge_check)
    _check_with = forward(lambda: _ops.merge.check_with)
    merge_branch = forward(lambda: _ops.branch_merge.merge_branch)
    merge_base = forward(lambda: _ops.ancestry.merge_base)
    merge_bases = forward(lambda: _ops.ancestry.merge_bases)
    is_ancestor = forward(lambda: _ops.ancestry.is_ancestor)
    is_branch_merge = forward(lambda: _ops.ancestry.is_branch_merge)
    revert = forward(lambda: _ops.branch_merge.revert)
    lineage = forward(lambda: _ops.lineage.lineage)
    merge_record = forward(lambda: _ops.lineage.merge_record)
    verify_merge = forward_reading(lambda: _ops.verify_merge.verify_merge)
    sketch = forward(lambda: _ops.sketch.sketch)
    sketch_record = forward(lambda: _ops.sketch.read_record)

    branch_info = forward(lambda: _ops.refs.branch_info)
    create_branch = forward(lambda: _ops.refs.create_branch)
    delete_branch = forward(lambda: _ops.refs.delete_branch)
    rename_branch = forward(lambda: _ops.refs.rename_branch)
    tag = forward(lambda: _ops.refs.tag)
    tag_messages = forward(lambda: _ops.refs.tag_messages)
    delete_tag = forward(lambda: _ops.refs.delete_tag)
    reflog_ref = forward(lambda: _ops.refs.reflog_ref)
    reflog = forward(lambda: _ops.refs.reflog)
    reflog_expire = forward(lambda: _ops.maintain.reflog_expire)

    remotes = forward(lambda: _ops.remotes.remotes)
    remote_add = forward(lambda: _ops.remotes.remote_add)
    remote_remove = forward(lambda: _ops.remotes.remote_remove)
    remote_branch_for = forward(lambda: _ops.remotes.remote_branch_for)
    push = forward(lambda: _ops.sync.push)
    fetch = forward(lambda: _ops.sync.fetch)
    pull = forward(lambda: _ops.sync.pull)

    gc = forward(lambda: _ops.maintain.gc)
    fsck = forward(lambda: _ops.maintain.fsck)
    fsck_repair = forward(lambda: _ops.maintain.fsck_repair)
    leftovers = forward(lambda: _ops.maintain.leftovers)
    du = forward(lambda: _ops.maintain.du)
    store_usage = forward(lambda: _ops.maintain.store_usage)


__all__ = [
    "RESET_MODES",
    "AddResult",
    "BranchMerge",
    "CheckoutResult",
    "FileInfo",
    "LogGraph",
    "Pulled",
    "Repair",
    "Repository",
    "ResetResult",
    "RevisionError",
    "ShowInfo",
]
