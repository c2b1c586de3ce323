"""Repository: mgit's Python API, a thin facade over mgit.ops. Each method is one operation
called on the repository's :class:`~mgit.context.Context` (``self.ctx``); its signature and
its docstring are the operation's (docs/guide.md is the guide). Paths given to its methods
are absolute or relative to the repository root.
"""

from __future__ import annotations

import functools
import inspect
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Concatenate, ParamSpec, TypeVar

from mgit.context import Context
from mgit.context import find_root as _find_root  # noqa: F401  (the cli imports it from here)
from mgit.errors import RevisionError
from mgit.graph.objects import Graph
from mgit.graph.refs import Refs
from mgit.graph.snapshot import Snapshot
from mgit.lock import RepoLock
from mgit.ops import checkout as _checkout
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
from mgit.ops.inspect import FileInfo, ShowInfo
from mgit.ops.maintain import Repair
from mgit.ops.reset import RESET_MODES, ResetResult
from mgit.ops.stage import AddResult
from mgit.ops.workfiles import CheckoutResult
from mgit.remote.backend import Backend
from mgit.remote.promisor import Promisor
from mgit.remote.transfer import Transfer
from mgit.store.chunkstore import ChunkStore
from mgit.worktree.index import Index
from mgit.worktree.sparse import SparsePatterns, load_patterns

P = ParamSpec("P")
R = TypeVar("R")


def _op(op: Callable[Concatenate[Context, P], R]) -> Callable[Concatenate[Repository, P], R]:
    """A facade method: ``op`` called on the repository's context."""

    @functools.wraps(op)
    def method(self: Repository, /, *args: P.args, **kwargs: P.kwargs) -> R:
        return op(self.ctx, *args, **kwargs)

    return _as_method(method, op)


def _reading(op: Callable[Concatenate[Context, P], R]) -> Callable[Concatenate[Repository, P], R]:
    """As :func:`_op`, within ``Context.reading()``: in a partial clone the command's reads may
    fetch chunks, so it holds the lock and publishes what it fetched when done."""

    @functools.wraps(op)
    def method(self: Repository, /, *args: P.args, **kwargs: P.kwargs) -> R:
        with self.ctx.reading():
            return op(self.ctx, *args, **kwargs)

    return _as_method(method, op)


def _as_method(method: Callable[..., R], op: Callable[..., R]) -> Callable[..., R]:
    """``help()`` and ``inspect.signature`` show the operation's parameters, ``self`` first."""
    sig = inspect.signature(op)
    first, *rest = sig.parameters.values()
    method.__signature__ = sig.replace(parameters=[first.replace(name="self", annotation=first.empty), *rest])  # type: ignore[attr-defined]
    return method


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

    identity = _op(Context.identity)
    config_set = _op(Context.config_set)
    config_get = _op(Context.config_get)
    config_list = _op(Context.config_list)

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

    add = _op(_stage.add)
    rm = _op(_stage.rm)
    mv = _op(_move.mv)
    commit = _op(_stage.commit)
    commit_state_dict = _op(_stage.commit_state_dict)
    stash = _op(_stash.stash)
    stash_list = _op(_stash.stash_list)
    stash_apply = _reading(_stash.stash_apply)
    stash_pop = _reading(_stash.stash_pop)
    stash_drop = _op(_stash.stash_drop)

    status = _op(_inspect.status)
    log = _op(_inspect.log)
    show = _op(_inspect.show)
    commit_stats = _op(_inspect.commit_stats)
    diff = _reading(_inspect.diff)
    models = _op(_inspect.models)
    state_dict = _reading(_inspect.state_dict)

    checkout = _reading(_checkout.checkout)
    reset = _reading(_reset.reset)
    switch = _reading(_switching.switch)
    restore = _reading(_switching.restore)

    merge = _op(_merge.merge)
    merge_plan = _op(_merge.merge_plan)
    lineage = _op(_lineage.lineage)
    merge_record = _op(_lineage.merge_record)
    sketch = _op(_sketch.sketch)
    sketch_record = _op(_sketch.read_record)

    branch_info = _op(_refs.branch_info)
    create_branch = _op(_refs.create_branch)
    delete_branch = _op(_refs.delete_branch)
    rename_branch = _op(_refs.rename_branch)
    tag = _op(_refs.tag)
    tag_messages = _op(_refs.tag_messages)
    delete_tag = _op(_refs.delete_tag)
    reflog_ref = _op(_refs.reflog_ref)
    reflog = _op(_refs.reflog)
    reflog_expire = _op(_maintain.reflog_expire)

    remotes = _op(_remotes.remotes)
    remote_add = _op(_remotes.remote_add)
    remote_remove = _op(_remotes.remote_remove)
    remote_branch_for = _op(_remotes.remote_branch_for)
    push = _op(_sync.push)
    fetch = _op(_sync.fetch)
    pull = _op(_sync.pull)

    gc = _op(_maintain.gc)
    fsck = _op(_maintain.fsck)
    fsck_repair = _op(_maintain.fsck_repair)
    leftovers = _op(_maintain.leftovers)
    du = _op(_maintain.du)
    store_usage = _op(_maintain.store_usage)


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
