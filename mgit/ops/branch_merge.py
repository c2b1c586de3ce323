"""Git's merge for models: ``merge REV`` without a method (up to date, a fast-forward, or a
three-way merge committed with parents [HEAD, REV]) and ``revert REV`` (the inverse change,
three-way). The merging itself is mgit.ops.threeway over mgit.merge.threeway; how REV stands
to HEAD (merge bases, as git finds them) is mgit.ops.ancestry."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from typing import Any

from mgit.context import Context
from mgit.errors import BadInputError, MgitError, NonFastForwardError
from mgit.ops.ancestry import relation
from mgit.ops.merge import install_merge
from mgit.ops.threeway import (
    BranchMerge,
    ConflictPolicy,
    Sides,
    commit_merge,
    reflog_action,
    refuse_staged,
    settled_note,
    three_way,
)
from mgit.ops.workfiles import refuse_local_changes

FF_MODES = ("auto", "no", "only")  # --ff (default), --no-ff, --ff-only


def merge_branch(
    ctx: Context,
    rev: str,
    *,
    ours: Iterable[str] = (),
    theirs: Iterable[str] = (),
    method: str | None = None,
    seed: int | None = None,
    message: str | None = None,
    ff: str = "auto",
    op: str = "merge",
    **params: Any,
) -> BranchMerge:
    """Merge a revision into the current branch as git does.

    Already in HEAD: nothing changes. HEAD in ``rev``'s history: a fast-forward. Otherwise a
    three-way merge over the merge bases, committed with parents [HEAD, rev]: each path, tensor
    and ``__metadata__`` key from the side that changed it, text files merged by lines.
    Conflicts commit nothing unless ``ours``, ``theirs`` or ``method`` settle them.

    Args:
        rev: The branch, tag or commit to merge.
        ours: fnmatch patterns over ``PATH`` and ``PATH:TENSOR``: conflicts settled as HEAD has them.
        theirs: Likewise, settled as ``rev`` has them.
        method: A merge method (mgit.merge.methods) for tensors both sides changed.
        seed: A random method's seed.
        message: The merge commit's message (default: git's ``Merge branch …``).
        ff: ``"auto"``, ``"no"`` (a merge commit even for a fast-forward) or ``"only"``
            (anything but a fast-forward is refused).
        op: The command named in messages and the reflog (``pull``).
        **params: ``method``'s mergekit parameters (default weights 1, 1).

    Returns:
        What was done (``kind``: up-to-date, fast-forward, merged or conflict), the commits, the
        changes and the conflicts settled.

    Raises:
        MergeConflictError: Conflicts left unsettled; nothing is committed.
        NonFastForwardError: Not a fast-forward, with ``ff="only"``.
        BadInputError: Unrelated histories, or an unknown ``ff`` mode or method parameter.
        DirtyWorktreeError: Uncommitted changes the merge would overwrite.
        RevisionError: ``rev`` names no commit.
    """
    if ff not in FF_MODES:
        raise BadInputError(f"unknown fast-forward mode {ff!r} (one of {', '.join(FF_MODES)})")
    policy = ConflictPolicy.of(ours, theirs, method, params, seed)
    with ctx.writing():
        head, target = ctx.refs.head(), ctx.refs.resolve(rev)
        how, bases = relation(ctx, rev)
        made = BranchMerge(how, rev, target, head, ctx.refs.current_branch(), target, bases, op=op)
        if how == "up-to-date":
            return made
        if how == "fast-forward" and (ff != "no" or head is None):
            return _fast_forward(ctx, made)
        if how == "unrelated":
            raise BadInputError(f"refusing to merge unrelated histories: {rev} and HEAD have no commit in common")
        if ff == "only":
            raise _not_fast_forward(op, rev)
        assert head is not None
        refuse_staged(ctx.index(), ctx.head_snapshot(), op)
        sides = Sides.of(ctx, bases, head, target, ("HEAD", rev))
        merged = three_way(ctx, sides, policy, made)
        text = message or default_message(ctx, rev) + settled_note(merged, bases[0])
        commit = commit_merge(ctx, sides, merged, [head, target], text, made)
        return merged.report(made, "merged", commit)


def _not_fast_forward(op: str, rev: str) -> NonFastForwardError:
    """--ff-only refusing diverged histories, saying how to merge them."""
    instead = (
        "merge without --ff-only"
        if op == "merge"
        else f"merge them with `mgit merge {rev}` (or `mgit {op}` without --ff-only)"
    )
    return NonFastForwardError(f"not possible to fast-forward: HEAD and {rev} have diverged; {instead}")


def _fast_forward(ctx: Context, made: BranchMerge) -> BranchMerge:
    """Move the branch to REV and the working tree with it, journaled as a merge's result is
    (refusing first to overwrite uncommitted changes in the files it changes)."""
    from mgit.merge.threeway.snapshots import FileChange

    head_snap, target_snap = ctx.head_snapshot(), ctx.snapshot(made.target)
    touched = {p for p in set(head_snap) | set(target_snap) if head_snap.get(p) != target_snap.get(p)}
    refuse_local_changes(ctx, ctx.index(), head_snap, touched, made.op)
    reflog = f"{reflog_action(made)}: Fast-forward"
    install_merge(ctx, made.target, head_snap, target_snap, made.old_head, reflog, op=made.op, rev=made.rev)
    changed = {p: FileChange("theirs" if p in target_snap else "deleted") for p in sorted(touched)}
    return dataclasses.replace(made, kind="fast-forward", commit=made.target, changed=changed)


def default_message(ctx: Context, rev: str, into: str | None = None) -> str:
    """git's: ``Merge branch 'x'`` (a remote-tracking branch, a tag, a commit: so named), with
    `` into BRANCH`` unless the current branch is main or master."""
    refs = ctx.refs
    if rev in refs.branches():
        what = f"branch '{rev}'"
    elif rev in refs.remote_branches():
        what = f"remote-tracking branch '{rev}'"
    elif rev in refs.tags():
        what = f"tag '{rev}'"
    else:
        what = f"commit '{rev}'"
    current = into or refs.current_branch()
    return f"Merge {what}" + (f" into {current}" if current and current not in ("main", "master") else "")


def revert(
    ctx: Context,
    rev: str,
    *,
    mainline: int | None = None,
    ours: Iterable[str] = (),
    theirs: Iterable[str] = (),
    method: str | None = None,
    seed: int | None = None,
    message: str | None = None,
    **params: Any,
) -> BranchMerge:
    """A new commit on HEAD undoing a commit's change, as ``git revert`` does.

    A three-way merge with ``rev`` as the base, HEAD as ours and ``rev``'s parent as theirs, so
    later changes to the same tensors are conflicts (settled as :func:`merge_branch`'s are).

    Args:
        rev: The commit to undo.
        mainline: For a merge commit, the parent whose side is kept (1-based).
        ours: Patterns of conflicts settled as HEAD has them.
        theirs: Patterns of conflicts settled as ``rev``'s parent has them.
        method: A merge method for tensors both sides changed.
        seed: A random method's seed.
        message: The commit message (default: git's ``Revert "…"``).
        **params: ``method``'s mergekit parameters.

    Returns:
        What was done (``kind``: reverted or conflict) and the new commit.

    Raises:
        MergeConflictError: Conflicts left unsettled; nothing is committed.
        BadInputError: A merge commit without ``mainline`` (or a mainline it lacks), or no commit yet.
        MgitError: HEAD no longer holds ``rev``'s change (nothing to commit).
        DirtyWorktreeError: Uncommitted changes the revert would overwrite.
    """
    policy = ConflictPolicy.of(ours, theirs, method, params, seed)
    with ctx.writing():
        head = ctx.refs.head()
        if head is None:
            raise BadInputError("nothing to revert onto: the branch has no commit yet")
        target = ctx.refs.resolve(rev)
        reverted = ctx.graph.commit(target)
        parent = _mainline_parent(target, reverted.parents, mainline)
        refuse_staged(ctx.index(), ctx.head_snapshot(), "revert")
        made = BranchMerge("reverted", rev, target, head, ctx.refs.current_branch(), parent, [target], op="revert")
        sides = Sides.of(ctx, [target], head, parent, ("HEAD", f"{rev}^" if mainline is None else f"{rev}^{mainline}"))
        merged = three_way(ctx, sides, policy, made)
        if merged.tree.merged == sides.ours_snap:
            raise MgitError(f"nothing to commit: HEAD does not hold the change of {rev} ({target[:12]}) any more")
        text = message or _revert_message(reverted.summary, target, parent if mainline is not None else None)
        text += settled_note(merged, target) if message is None else ""
        commit = commit_merge(ctx, sides, merged, [head], text, made)
        return merged.report(made, "reverted", commit)


def _mainline_parent(target: str, parents: tuple[str, ...], mainline: int | None) -> str | None:
    """The parent a revert goes back to (None: a root commit's empty tree)."""
    if len(parents) > 1 and mainline is None:
        raise BadInputError(f"commit {target[:12]} is a merge but no -m option was given (-m 1: keep its first parent)")
    if len(parents) <= 1 and mainline is not None:
        raise BadInputError(f"mainline was specified but commit {target[:12]} is not a merge")
    if mainline is not None and not 1 <= mainline <= len(parents):
        raise BadInputError(f"commit {target[:12]} does not have parent {mainline} (it has {len(parents)})")
    return parents[(mainline or 1) - 1] if parents else None


def _revert_message(subject: str, target: str, parent: str | None) -> str:
    """git's: ``Revert "<subject>"`` and ``This reverts commit <id>.`` (a merge's: and which
    parent's changes it reverses to)."""
    body = f"This reverts commit {target}"
    return f'Revert "{subject}"\n\n{body}' + (f", reversing\nchanges made to {parent}." if parent else ".")
