"""Opening a repository: its Context with the journal recovery that taking the lock runs
(mgit.ops.recover) and, in a partial clone, the promisor composed into its store; and
laying out a new one (``mgit init``)."""

from __future__ import annotations

import os
from pathlib import Path

from mgit.context import Context
from mgit.graph.formats import FORMAT_VERSION
from mgit.ops import remotes


def _recover(ctx: Context) -> None:
    """The journal's roll-forward, imported when the lock is first taken: a command that only
    reads (status, log) never loads the checkout machinery."""
    from mgit.ops import recover

    recover.recover(ctx)


def open_repository(path: str | os.PathLike[str] = ".") -> Context:
    """The repository holding ``path``, opened."""
    ctx = Context(path, on_lock=_recover)
    ctx.promisor = remotes.open_promisor(ctx)
    return ctx


def init(path: str | os.PathLike[str] = ".") -> Context:
    """A new, empty repository at ``path`` (refused if there is one), opened."""
    root = Path(path).resolve()
    Context.create(root)
    ctx = open_repository(root)
    ctx.set_format(FORMAT_VERSION)
    return ctx
