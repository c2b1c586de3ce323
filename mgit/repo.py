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

    from mgit import context as _context
    from mgit.context import Context
    from mgit.graph.objects import Graph
    from mgit.graph.refs import Refs
    from mgit.graph.snapshot import Snapshot
    from mgit.lock import RepoLock
    from mgit.ops import ancestry as _ancestry
    from mgit.ops import branch_merge as _branch_merge
    from mgit.ops import checkout as _checkout
    from mgit.ops import history as _history
    from mgit.ops import inspect as _inspect
    from mgit.ops import lineage as _lineage
    from mgit.ops import maintain as _maintain
    from mgit.ops import merge as _merge
    from mgit.ops import move as _move
    from mgit.ops import opening as _opening
    from mgit.ops import refs as _refs
    from mgit.ops import remotes as _remotes
    from mgit.ops import reset as _reset
    from mgit.ops import sketch as _sketch
    from mgit.ops import stage as _stage
    from mgit.ops import stash as _stash
    from mgit.ops import switching as _switching
    from mgit.ops import sync as _sync
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
    _context = lazy_module("mgit.context")
    _ancestry = lazy_module("mgit.ops.ancestry")
    _branch_merge = lazy_module("mgit.ops.branch_merge")
    _checkout = lazy_module("mgit.ops.checkout")
    _history = lazy_module("mgit.ops.history")
    _inspect = lazy_module("mgit.ops.inspect")
    _lineage = lazy_module("mgit.ops.lineage")
    _maintain = lazy_module("mgit.ops.maintain")
    _merge = lazy_module("mgit.ops.merge")
    _move = lazy_module("mgit.ops.move")
    _stash = lazy_module("mgit.ops.stash")
    _switching = lazy_module("mgit.ops.switching")
    _opening = lazy_module("mgit.ops.opening")
    _refs = lazy_module("mgit.ops.refs")
    _remotes = lazy_module("mgit.ops.remotes")
    _reset = lazy_module("mgit.ops.reset")
    _sketch = lazy_module("mgit.ops.sketch")
    _stage = lazy_module("mgit.ops.stage")
    _sync = lazy_module("mgit.ops.sync")

# The result types scripts import from here, each from its operation's module when first asked for.
_RESULT_TYPES = {
    "AddResult": "mgit.ops.stage",
    "BranchMerge": "mgit.ops.threeway",
    "CheckoutResult": "mgit.ops.workfiles",
    "FileInfo": "mgit.ops.inspect",
    "LogGraph": "mgit.ops.history",
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
        self.ctx: Context = _opening.open_repository(path)

    @classmethod
    def _of(cls, ctx: Context) -> Repository:
        """The facade of a context an operation opened (init, clone)."""
        repo = cls.__new__(cls)
        repo.ctx = ctx
        return repo

    @classmethod
    def init(cls, path: str | os.PathLike[str] = ".") -> Repository:
        """A new, empty repository at ``path`` (refused if there is one)."""
        return cls._of(_opening.init(path))

    @classmethod
    def clone(
        cls, url: str, path: str | os.PathLike[str], partial: bool = False, branch: str | None = None,
        token_file: str | None = None, include: Iterable[str] = (), exclude: Iterable[str] = (),
        budget: str | int | None = None,
    ) -> Repository:  # fmt: skip
        """A new repository at ``path`` cloned from ``url`` (see :func:`mgit.ops.sync.clone`)."""
        return cls._of(_sync.clone(url, path, partial, branch, token_file, include, exclude, budget))

    def close(self) -> None:
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
        """Repository-relative posix path ('' for the root); refuses paths outside."""
        return self.ctx.relpath(path)

    def snapshot(self, rev: str = "HEAD") -> Snapshot:
        """Path → Entry for every file of a revision."""
        return self.ctx.snapshot(rev)

    def resolve(self, rev: str) -> str:
        return self.ctx.resolve(rev)

    def _index(self) -> Index:
        """The index as it is on disk (tests and scripts look into it)."""
        return self.ctx.index()

    def _backend(self, name: str, create: bool = False) -> Backend:
        """Remote ``name``'s backend, opened (tests and scripts look into remotes with it)."""
        return _remotes.backend(self.ctx, name, create)

    def sparse_patterns(self) -> SparsePatterns | None:
        """The patterns of a sparse checkout (None: the checkout is full)."""
        from mgit.worktree.sparse import load_patterns

        return load_patterns(self.ctx.git_dir)

    def branches(self) -> dict[str, str]:
        return self.ctx.refs.branches()

    def remote_branches(self) -> dict[str, str]:
        """Remote-tracking branches (``origin/main`` → commit), as fetch and push left them."""
        return self.ctx.refs.remote_branches()

    def tags(self) -> dict[str, str]:
        return self.ctx.refs.tags()

    @staticmethod
    def tracking_ref(remote: str, ref: str) -> str | None:
        """The local ref a remote's ref is kept as (see :func:`mgit.ops.remotes.tracking_ref`)."""
        return _remotes.tracking_ref(remote, ref)

    # -- the operations (mgit.ops): one line each ------------------------------------------

    add = forward(lambda: _stage.add)
    rm = forward(lambda: _stage.rm)
    mv = forward(lambda: _move.mv)
    commit = forward(lambda: _stage.commit)
    commit_state_dict = forward(lambda: _stage.commit_state_dict)
    stash = forward(lambda: _stash.stash)
    stash_list = forward(lambda: _stash.stash_list)
    stash_apply = forward_reading(lambda: _stash.stash_apply)
    stash_pop = forward_reading(lambda: _stash.stash_pop)
    stash_drop = forward(lambda: _stash.stash_drop)

    status = forward(lambda: _inspect.status)
    log = forward(lambda: _history.log)
    log_graph = forward(lambda: _history.log_graph)
    show = forward(lambda: _inspect.show)
    changes = forward(lambda: _inspect.changes)
    commit_stats = forward(lambda: _inspect.commit_stats)
    diff = forward_reading(lambda: _inspect.diff)
    models = forward(lambda: _inspect.models)
    state_dict = forward_reading(lambda: _inspect.state_dict)

    checkout = forward_reading(lambda: _checkout.checkout)
    reset = forward_reading(lambda: _reset.reset)
    switch = forward_reading(lambda: _switching.switch)
    restore = forward_reading(lambda: _switching.restore)

    merge = forward(lambda: _merge.merge)
    merge_plan = forward(lambda: _merge.merge_plan)
    merge_branch = forward(lambda: _branch_merge.merge_branch)
    merge_base = forward(lambda: _ancestry.merge_base)
    merge_bases = forward(lambda: _ancestry.merge_bases)
    is_ancestor = forward(lambda: _ancestry.is_ancestor)
    is_branch_merge = forward(lambda: _ancestry.is_branch_merge)
    revert = forward(lambda: _branch_merge.revert)
    lineage = forward(lambda: _lineage.lineage)
    merge_record = forward(lambda: _lineage.merge_record)
    sketch = forward(lambda: _sketch.sketch)
    sketch_record = forward(lambda: _sketch.read_record)

    branch_info = forward(lambda: _refs.branch_info)
    create_branch = forward(lambda: _refs.create_branch)
    delete_branch = forward(lambda: _refs.delete_branch)
    rename_branch = forward(lambda: _refs.rename_branch)
    tag = forward(lambda: _refs.tag)
    tag_messages = forward(lambda: _refs.tag_messages)
    delete_tag = forward(lambda: _refs.delete_tag)
    reflog_ref = forward(lambda: _refs.reflog_ref)
    reflog = forward(lambda: _refs.reflog)
    reflog_expire = forward(lambda: _maintain.reflog_expire)

    remotes = forward(lambda: _remotes.remotes)
    remote_add = forward(lambda: _remotes.remote_add)
    remote_remove = forward(lambda: _remotes.remote_remove)
    remote_branch_for = forward(lambda: _remotes.remote_branch_for)
    push = forward(lambda: _sync.push)
    fetch = forward(lambda: _sync.fetch)
    pull = forward(lambda: _sync.pull)

    gc = forward(lambda: _maintain.gc)
    fsck = forward(lambda: _maintain.fsck)
    fsck_repair = forward(lambda: _maintain.fsck_repair)
    leftovers = forward(lambda: _maintain.leftovers)
    du = forward(lambda: _maintain.du)
    store_usage = forward(lambda: _maintain.store_usage)


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
