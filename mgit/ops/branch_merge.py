"""Git's merge for models: ``merge-base``, ``merge REV`` without a method (up to date, a
fast-forward, or a three-way merge committed with parents [HEAD, REV]) and ``revert REV`` (the
inverse change, three-way). The merging itself is mgit.ops.threeway over mgit.merge.threeway;
merge bases are dulwich's (dulwich.graph), as git finds them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from dulwich.graph import can_fast_forward, find_merge_base

from mgit.context import Context
from mgit.errors import BadInputError, MgitError, NonFastForwardError
from mgit.graph.ids import object_id
from mgit.ops.merge import install_merge
from mgit.ops.threeway import BranchMerge, Settle, Sides, commit_merge, refuse_local_changes, settled_note, three_way

FF_MODES = ("auto", "no", "only")  # --ff (default), --no-ff, --ff-only
STRATEGY = "Merge made by the 'three-way' strategy."


def merge_bases(ctx: Context, revs: Iterable[str]) -> list[str]:
    """The best common ancestors of the first revision and any of the others, as ``git
    merge-base --all`` finds them ([] when they share no history)."""
    commits = [object_id(ctx.refs.resolve(r).encode()) for r in revs]
    if len(commits) < 2:
        raise BadInputError("merge-base needs two revisions")
    return [c.decode() for c in find_merge_base(ctx.graph.repo, commits)]


def merge_base(ctx: Context, a: str, b: str, *others: str) -> str | None:
    """One best common ancestor of ``a`` and ``b`` (and the ``others``), or None."""
    found = merge_bases(ctx, [a, b, *others])
    return found[0] if found else None


def is_ancestor(ctx: Context, a: str, b: str) -> bool:
    """Whether ``a`` is ``b`` or one of its ancestors (``git merge-base --is-ancestor``)."""
    old, new = (object_id(ctx.refs.resolve(r).encode()) for r in (a, b))
    return bool(can_fast_forward(ctx.graph.repo, old, new))


def relation(ctx: Context, rev: str) -> str:
    """How ``rev`` stands to HEAD: ``up-to-date`` (HEAD has it), ``fast-forward`` (it has HEAD),
    ``diverged`` (each has commits the other lacks) or ``unrelated`` (no common history)."""
    head, theirs = ctx.refs.head(), ctx.refs.resolve(rev)
    if head is None:
        return "fast-forward"
    if is_ancestor(ctx, theirs, head):
        return "up-to-date"
    if is_ancestor(ctx, head, theirs):
        return "fast-forward"
    return "diverged" if merge_bases(ctx, [head, theirs]) else "unrelated"


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
    reflog: str | None = None,
    **params: Any,
) -> BranchMerge:
    """Merge revision ``rev`` into the current branch as git does. Already in HEAD: nothing
    changes. HEAD in ``rev``'s history: a fast-forward (``ff="no"``: a merge commit anyway).
    Otherwise a three-way merge over the merge base, committed with parents [HEAD, rev]: each
    path, tensor and ``__metadata__`` key from the side that changed it, text files merged by
    lines. Conflicts raise MergeConflictError and commit nothing, unless settled: ``ours`` /
    ``theirs`` (fnmatch patterns over ``PATH`` and ``PATH:TENSOR``), ``method`` (with mergekit
    ``params``; default weights 1, 1) for tensors both sides changed. ``ff="only"`` refuses
    anything but a fast-forward. ``reflog`` names the command in the reflog (pull)."""
    if ff not in FF_MODES:
        raise BadInputError(f"unknown fast-forward mode {ff!r} (one of {', '.join(FF_MODES)})")
    settle = Settle(tuple(_patterns(ours)), tuple(_patterns(theirs)), method, params, seed)
    settle.check()
    action = reflog or f"merge {rev}"
    with ctx.writing():
        head, target = ctx.refs.head(), ctx.refs.resolve(rev)
        report = BranchMerge("up-to-date", rev, target, head, ctx.refs.current_branch(), op=reflog or "merge")
        how = relation(ctx, rev)
        if how == "up-to-date":
            return report
        if how == "fast-forward" and (ff != "no" or head is None):
            return _fast_forward(ctx, report, f"{action}: Fast-forward")
        if how == "unrelated":
            raise BadInputError(f"refusing to merge unrelated histories: {rev} and HEAD have no commit in common")
        if ff == "only":
            raise NonFastForwardError(
                f"not possible to fast-forward: HEAD and {rev} have diverged; merge without --ff-only"
            )
        assert head is not None
        report.base = merge_bases(ctx, [head, target])[0]  # criss-cross histories: one of them, as git's resolve
        sides = Sides.of(ctx, report.base, head, target, ("HEAD", rev))
        tree, stats = three_way(ctx, sides, settle, report)
        text = message or default_message(ctx, rev) + settled_note(report)
        commit_merge(ctx, sides, tree, stats, [head, target], text, f"{action}: {STRATEGY}", report)
        report.kind = "merged"
        return report


def _patterns(given: Iterable[str]) -> list[str]:
    """A single pattern given as a string is one pattern, not one per character."""
    return [given] if isinstance(given, str) else list(given)


def _fast_forward(ctx: Context, report: BranchMerge, reflog: str) -> BranchMerge:
    """Move the branch to REV and the working tree with it, journaled as a merge's result is
    (refusing first to overwrite uncommitted changes in the files it changes)."""
    head_snap, target_snap = ctx.head_snapshot(), ctx.snapshot(report.theirs)
    touched = {p for p in set(head_snap) | set(target_snap) if head_snap.get(p) != target_snap.get(p)}
    refuse_local_changes(ctx, ctx.index(), head_snap, touched, report.op)
    install_merge(ctx, report.theirs, head_snap, target_snap, report.old_head, reflog, {}, "merge", report.rev)
    report.kind, report.commit = "fast-forward", report.theirs
    report.changed = {p: [] for p in sorted(touched)}
    return report


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
    """A new commit on HEAD undoing ``rev``'s change, as git reverts: a three-way merge with
    ``rev`` as the base, HEAD as ours and ``rev``'s parent as theirs, so later changes to the
    same tensors are conflicts (settled as a merge's are). A merge commit needs ``mainline``
    (1-based: the parent whose side is kept)."""
    settle = Settle(tuple(_patterns(ours)), tuple(_patterns(theirs)), method, params, seed)
    settle.check()
    with ctx.writing():
        head = ctx.refs.head()
        if head is None:
            raise BadInputError("nothing to revert onto: the branch has no commit yet")
        target = ctx.refs.resolve(rev)
        reverted = ctx.graph.commit(target)
        parent = _mainline_parent(target, reverted.parents, mainline)
        report = BranchMerge("reverted", rev, target, head, ctx.refs.current_branch(), base=target, op="revert")
        sides = Sides.of(ctx, target, head, parent, ("HEAD", f"{rev}^" if mainline is None else f"{rev}^{mainline}"))
        tree, stats = three_way(ctx, sides, settle, report)
        if tree.merged == sides.snaps[1]:
            raise MgitError(f"nothing to commit: HEAD does not hold the change of {rev} ({target[:12]}) any more")
        text = message or _revert_message(reverted.summary, target, parent if mainline is not None else None)
        text += settled_note(report) if message is None else ""
        commit_merge(ctx, sides, tree, stats, [head], text, f"revert: {text.splitlines()[0]}", report)
        return report


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
