"""How commits stand to each other, as git's merge sees them: their merge bases (dulwich's
``find_merge_base``, which follows parents whatever the commit dates say), whether one holds
another, how a revision stands to HEAD, and so whether ``merge REV --method`` merges a branch
or models. Used by ``merge-base``, ``merge``, ``pull`` and the model merge's own guard."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from mgit.context import Context
from mgit.errors import BadInputError, RevisionError
from mgit.graph import walks


def merge_bases(ctx: Context, revs: Iterable[str]) -> list[str]:
    """The best common ancestors of the first revision and any of the others.

    As ``git merge-base --all`` finds them (dulwich's graph walk).

    Args:
        revs: Two revisions or more.

    Returns:
        Their merge bases' ids ([] when they share no history).

    Raises:
        BadInputError: Fewer than two revisions.
        RevisionError: A revision names no commit.
    """
    from dulwich.graph import find_merge_base

    from mgit.graph.ids import object_id

    commits = [object_id(ctx.refs.resolve(r).encode()) for r in revs]
    if len(commits) < 2:
        raise BadInputError("merge-base needs two revisions")
    return [c.decode() for c in find_merge_base(ctx.graph.repo, commits)]


def merge_base(ctx: Context, a: str, b: str, *others: str) -> str | None:
    """One best common ancestor of revisions, as ``git merge-base`` prints it.

    Args:
        a: A revision.
        b: Another revision.
        *others: More revisions (a base of ``a`` and any of ``b`` and these).

    Returns:
        The merge base's id, or None when they share no history.

    Raises:
        RevisionError: A revision names no commit.
    """
    found = merge_bases(ctx, [a, b, *others])
    return found[0] if found else None


def is_ancestor(ctx: Context, a: str, b: str) -> bool:
    """Whether one revision is in another's history (``git merge-base --is-ancestor``).

    Decided by a walk of the parents, never by the commit dates.

    Args:
        a: The possible ancestor.
        b: The descendant.

    Returns:
        True when ``a`` is ``b`` or one of its ancestors.

    Raises:
        RevisionError: A revision names no commit.
    """
    return walks.is_ancestor(ctx.graph, ctx.refs.resolve(a), ctx.refs.resolve(b))


def relation(ctx: Context, rev: str) -> tuple[str, list[str]]:
    """How ``rev`` stands to HEAD, and their merge bases: ``up-to-date`` (HEAD has it),
    ``fast-forward`` (it has HEAD, or HEAD is unborn), ``diverged`` (each has commits the other
    lacks) or ``unrelated`` (no common history)."""
    head, theirs = ctx.refs.head(), ctx.refs.resolve(rev)
    if head is None:
        return "fast-forward", []
    bases = merge_bases(ctx, [head, theirs])
    if theirs in bases:
        return "up-to-date", bases
    if head in bases:
        return "fast-forward", bases
    return ("diverged" if bases else "unrelated"), bases


def is_branch_merge(ctx: Context, revs: Sequence[str]) -> bool:
    """Whether ``merge REVS --method M`` (no base named) merges a branch or merges models.

    It is git's merge of a branch (the method settling its conflicting tensors) for one
    revision HEAD is not strictly behind: a model merge over HEAD would take REV's whole
    difference from HEAD, which for a revision not ahead of HEAD undoes HEAD's own changes
    since they parted.

    Args:
        revs: The revisions named.

    Returns:
        True for a branch merge (:func:`mgit.ops.branch_merge.merge_branch`), False for a model
        merge over HEAD.

    Raises:
        RevisionError: A revision names no commit.
    """
    if len(revs) != 1 or ctx.refs.head() is None:
        return False
    try:
        how, _ = relation(ctx, revs[0])
    except RevisionError:
        return False  # a model directory, imported as a new root commit
    return how != "fast-forward"
