"""Branches, tags and reflogs: listings and changes of refs, each change under the lock
(the refs layer, mgit.graph.refs, checks names and moves refs by compare-and-swap)."""

from __future__ import annotations

from mgit.context import Context
from mgit.graph.refs import reflog_entries
from mgit.graph.refs import reflog_ref as full_reflog_ref


def create_branch(ctx: Context, name: str, rev: str = "HEAD", force: bool = False) -> None:
    """Create branch ``name`` at ``rev``; ``force`` moves an existing one there (not the
    checked-out branch, unless it already is at ``rev``: that is what ``reset`` is for)."""
    with ctx.lock:
        if force:
            ctx.refs.force_branch(name, ctx.refs.resolve(rev), rev)
        else:
            ctx.refs.create_branch(name, ctx.refs.resolve(rev))


def delete_branch(ctx: Context, name: str, force: bool = True) -> str:
    """Delete a branch, returning the commit it held; ``force=False`` refuses one not merged
    into HEAD or its upstream (``mgit branch -d``; ``-D`` forces). Its reflog is kept, so
    ``NAME@{1}`` and its commits stay until ``reflog expire`` (``mgit branch NAME NAME@{1}``
    brings it back)."""
    with ctx.lock:
        return ctx.refs.delete_branch(name, force=force)


def rename_branch(ctx: Context, old: str, new: str, force: bool = False) -> None:
    """Rename a branch with its reflog; HEAD follows when it is the current one. ``force``
    (``branch -M``) replaces a branch ``new`` that exists, as git does."""
    with ctx.lock:
        ctx.refs.rename_branch(old, new, force=force)


def tag(ctx: Context, name: str, rev: str = "HEAD") -> None:
    with ctx.lock:
        ctx.refs.create_tag(name, ctx.refs.resolve(rev))


def delete_tag(ctx: Context, name: str) -> None:
    with ctx.lock:
        ctx.refs.delete_tag(name)


def reflog_ref(ctx: Context, ref: str = "HEAD") -> str:
    """The full ref whose reflog ``reflog(ref)`` reads (``origin/main`` → refs/remotes/origin/main)."""
    return full_reflog_ref(ctx.git_dir, ctx.refs, ref)


def reflog(ctx: Context, ref: str = "HEAD") -> list[tuple[str, str, int, str]]:
    """(old id or "", new id, time, message) of each move of ``ref``, newest first; empty
    for a tag (tags keep no reflog, as in git)."""
    out = []
    for e in reversed(reflog_entries(ctx.git_dir, reflog_ref(ctx, ref))):
        old = e.old_sha.decode()
        message = e.message.decode(errors="replace")
        out.append(("" if set(old) == {"0"} else old, e.new_sha.decode(), e.timestamp, message))
    return out
