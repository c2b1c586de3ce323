"""Branches, tags and reflogs: listings and changes of refs, each change under the lock
(the refs layer, mgit.graph.refs, checks names and moves refs by compare-and-swap)."""

from __future__ import annotations

from dataclasses import dataclass

from mgit.context import Context
from mgit.errors import BadInputError
from mgit.graph.refs import reflog_entries
from mgit.graph.refs import reflog_ref as full_reflog_ref
from mgit.graph.walks import ancestors


@dataclass(frozen=True)
class BranchInfo:
    """A branch as `branch -v` shows it; ``upstream`` (``-vv``): the remote-tracking branch of
    the same name (``origin``'s first), with the commits only one side has."""

    name: str
    commit: str
    subject: str
    upstream: str | None = None
    ahead: int = 0
    behind: int = 0


def branch_info(ctx: Context, upstreams: bool = False) -> list[BranchInfo]:
    """Every local branch with its tip's subject (``upstreams``: and how it stands to its
    upstream, counted over the commits held here)."""
    tracking = ctx.refs.remote_branches()
    out = []
    for name, commit in sorted(ctx.refs.branches().items()):
        subject = ctx.graph.commit(commit).summary
        mates = sorted((t for t in tracking if t.partition("/")[2] == name), key=lambda t: (t != f"origin/{name}", t))
        if not upstreams or not mates:
            out.append(BranchInfo(name, commit, subject))
            continue
        ours, theirs = ancestors(ctx.graph, commit), ancestors(ctx.graph, tracking[mates[0]])
        out.append(BranchInfo(name, commit, subject, mates[0], len(ours - theirs), len(theirs - ours)))
    return out


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


def tag(ctx: Context, name: str, rev: str = "HEAD", message: str | None = None) -> None:
    """Tag ``rev``; with ``message``, an annotated tag (``tag -a NAME -m MSG``: a git tag
    object, which every revision lookup peels to its commit)."""
    if message is not None and not message.strip():
        raise BadInputError("empty tag message; pass -m MESSAGE")
    with ctx.lock:
        ctx.refs.create_tag(name, ctx.refs.resolve(rev), message)


def tag_messages(ctx: Context) -> dict[str, str | None]:
    """Each tag's message: an annotated tag's own, None for a lightweight one."""
    return {name: ctx.refs.tag_message(name) for name in ctx.refs.tag_refs()}


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
