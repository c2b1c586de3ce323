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
    """Every local branch with its tip's subject, as ``branch -v`` (``-vv``) lists them.

    Args:
        upstreams: Also how each stands to its upstream (the remote-tracking branch of the
            same name), counted over the commits held here.

    Returns:
        Each branch's name, commit and subject (and upstream, ahead, behind).
    """
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
    """Create a branch, as ``git branch NAME [REV]`` does.

    Args:
        name: The new branch.
        rev: Where it starts.
        force: Move an existing branch there (not the checked-out branch, unless it already is
            at ``rev``: that is what ``reset`` is for).

    Raises:
        BadInputError: An invalid name, or a branch that exists (without ``force``).
        RevisionError: ``rev`` names no commit.
    """
    with ctx.lock:
        if force:
            ctx.refs.force_branch(name, ctx.refs.resolve(rev), rev)
        else:
            ctx.refs.create_branch(name, ctx.refs.resolve(rev))


def delete_branch(ctx: Context, name: str, force: bool = True) -> str:
    """Delete a branch; its reflog is kept, so it can be brought back.

    ``NAME@{1}`` and its commits stay until ``reflog expire`` (``mgit branch NAME NAME@{1}``
    brings it back).

    Args:
        name: The branch.
        force: Delete it even when it is not merged into HEAD or its upstream (``branch -D``;
            False: ``branch -d``).

    Returns:
        The commit it held.

    Raises:
        BadInputError: No such branch, the checked-out one, or one not merged (without ``force``).
        RefUpdateError: The branch moved meanwhile.
    """
    with ctx.lock:
        return ctx.refs.delete_branch(name, force=force)


def rename_branch(ctx: Context, old: str, new: str, force: bool = False) -> None:
    """Rename a branch with its reflog; HEAD follows when it is the current one.

    Args:
        old: The branch.
        new: Its new name.
        force: Replace a branch ``new`` that exists (``branch -M``), as git does.

    Raises:
        BadInputError: No branch ``old``, an invalid name, or ``new`` exists (without ``force``).
        RefUpdateError: A ref moved meanwhile.
    """
    with ctx.lock:
        ctx.refs.rename_branch(old, new, force=force)


def tag(ctx: Context, name: str, rev: str = "HEAD", message: str | None = None) -> None:
    """Tag a revision, as ``git tag`` does.

    Args:
        name: The tag.
        rev: What it names.
        message: Make an annotated tag (``tag -a NAME -m MSG``: a git tag object, which every
            revision lookup peels to its commit).

    Raises:
        BadInputError: An invalid name, a tag that exists, or an empty message.
        RevisionError: ``rev`` names no commit.
    """
    if message is not None and not message.strip():
        raise BadInputError("empty tag message; pass -m MESSAGE")
    with ctx.lock:
        ctx.refs.create_tag(name, ctx.refs.resolve(rev), message)


def tag_messages(ctx: Context) -> dict[str, str | None]:
    """Each tag's message, for ``tag -n``.

    Returns:
        Tag → an annotated tag's message, None for a lightweight one.
    """
    return {name: ctx.refs.tag_message(name) for name in ctx.refs.tag_refs()}


def delete_tag(ctx: Context, name: str) -> None:
    """Delete a tag (``tag -d``).

    Args:
        name: The tag.

    Raises:
        BadInputError: No such tag.
    """
    with ctx.lock:
        ctx.refs.delete_tag(name)


def reflog_ref(ctx: Context, ref: str = "HEAD") -> str:
    """The full ref whose reflog :func:`reflog` reads, for its display.

    Args:
        ref: A short or full ref name.

    Returns:
        The full ref (``origin/main`` → ``refs/remotes/origin/main``).
    """
    return full_reflog_ref(ctx.git_dir, ctx.refs, ref)


def reflog(ctx: Context, ref: str = "HEAD") -> list[tuple[str, str, int, str]]:
    """Each move of a ref, newest first, as ``git reflog`` shows them.

    Args:
        ref: A branch, ``HEAD`` or a remote-tracking branch.

    Returns:
        (old id or "", new id, time, message) per move; empty for a tag (tags keep no reflog,
        as in git).
    """
    out = []
    for e in reversed(reflog_entries(ctx.git_dir, reflog_ref(ctx, ref))):
        old = e.old_sha.decode()
        message = e.message.decode(errors="replace")
        out.append(("" if set(old) == {"0"} else old, e.new_sha.decode(), e.timestamp, message))
    return out
