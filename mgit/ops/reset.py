"""Reset: move the current branch (or a detached HEAD) to a revision, as git's reset (soft,
mixed, hard), or make only some paths' index entries a revision's. A hard reset writes the
working tree through the checkout machinery, journaled."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field

from mgit.context import Context
from mgit.errors import BadInputError, DirtyWorktreeError
from mgit.graph.snapshot import Snapshot
from mgit.ops import checkout, workfiles
from mgit.ops.paths import under
from mgit.ops.workfiles import CheckoutResult, clean, holds, shown
from mgit.worktree.index import Index, IndexEntry
from mgit.worktree.journal import Journal, Write
from mgit.worktree.sparse import load_patterns

RESET_MODES = ("soft", "mixed", "hard")


@dataclass
class ResetResult:
    """What ``reset`` did: the ref moved from ``old`` to ``commit``; with ``hard``, the files
    written and removed; with ``mixed``, the paths whose staged entry changed; with ``paths``,
    HEAD stayed (``commit`` = ``old``)."""

    commit: str | None  # None only for ``reset -- PATH`` on an unborn branch
    old: str | None
    mode: str
    branch: str | None  # the branch moved (None: a detached HEAD)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unstaged: list[str] = field(default_factory=list)
    paths: list[str] | None = None  # ``reset REV -- PATH``: the paths reset (HEAD did not move)


def reset(
    ctx: Context, rev: str = "HEAD", mode: str = "mixed", paths: Iterable[str | os.PathLike[str]] | None = None
) -> ResetResult:
    """Move the current branch (or a detached HEAD) to a revision, as ``git reset`` does.

    Without ``hard``, staged changes held by no commit and no working file are never dropped.

    Args:
        rev: Where the branch moves (with ``paths``: where their index entries come from).
        mode: ``"soft"`` keeps the index and the working tree; ``"mixed"`` makes the index
            ``rev``'s and keeps the working files (they show as modified); ``"hard"`` makes
            both ``rev``'s (written as a checkout writes them).
        paths: Only these paths' index entries become ``rev``'s; HEAD and the working files
            stay (``reset REV -- PATH``).

    Returns:
        The ref moved (old and new commit) and, by mode, the files written and removed or the
        index entries changed.

    Raises:
        BadInputError: An unknown mode, ``soft``/``hard`` with ``paths``, or a path matching nothing.
        RevisionError: ``rev`` names no commit.
        DirtyWorktreeError: Staged changes a reset would lose.
    """
    if mode not in RESET_MODES:
        raise BadInputError(f"unknown reset mode {mode!r}; use one of {', '.join(RESET_MODES)}")
    if paths is not None:
        return _reset_paths(ctx, rev, mode, list(paths))
    with ctx.lock:
        target = ctx.refs.resolve(rev)
        old = ctx.refs.head()
        result = ResetResult(target, old, mode, ctx.refs.current_branch())
        message = f"reset: moving to {rev}"
        if mode == "hard":
            plan = Journal("reset", rev, target, head="advance", old_head=old, message=message)
            _reset_worktree(ctx, ctx.index(), ctx.snapshot(target), result, plan)
            if old == target:  # the journal moved nothing; the reflog still records the reset, as git's
                ctx.refs.advance_head(old, target, message)
            return result
        if mode == "mixed":
            index = ctx.index()
            _reset_index(ctx, index, ctx.snapshot(target), result)
            index.save()
        ctx.refs.advance_head(old, target, message)
        return result


def _reset_paths(ctx: Context, rev: str, mode: str, paths: list[str | os.PathLike[str]]) -> ResetResult:
    """``reset [REV] -- PATH...``: the index entries at or below each path become ``rev``'s
    (removed where ``rev`` has none); HEAD, the branch and the working files stay. On an
    unborn branch ``HEAD`` has no files: the paths are unstaged."""
    if mode != "mixed":
        raise BadInputError(
            "reset --hard does not take paths; restore files with `mgit checkout REV -- PATH`"
            if mode == "hard"
            else "reset --soft does not take paths; `mgit reset -- PATH` unstages them"
        )
    if not paths:
        raise BadInputError("reset was given an empty list of paths; pass paths=None for a whole reset")
    with ctx.lock:
        head = ctx.refs.head()
        unborn = rev == "HEAD" and head is None
        target_snap = {} if unborn else ctx.snapshot(ctx.refs.resolve(rev))
        index = ctx.index()
        reset_paths: list[str] = []
        result = ResetResult(head, head, mode, ctx.refs.current_branch(), paths=reset_paths)
        only: set[str] = set()
        for p in paths:
            rel = ctx.relpath(p)
            found = under(index.entries, rel) + under(target_snap, rel)
            if not found:
                raise BadInputError(f"pathspec {rel or '.'!r} did not match any file in the index or in {rev}")
            only.update(found)
            reset_paths.append(rel)
        _reset_index(ctx, index, target_snap, result, only)
        index.save()
        return result


def _reset_index(
    ctx: Context, index: Index, target_snap: Snapshot, result: ResetResult, only: set[str] | None = None
) -> None:
    """``reset --mixed``: stage ``target_snap`` (``only``: at these paths), leaving every
    working file as it is."""
    head_snap = ctx.head_snapshot()
    lost = [
        p
        for p, ie in sorted(index.entries.items())
        if (only is None or p in only)
        and ie.entry != head_snap.get(p)
        and ie.entry != target_snap.get(p)
        and not _kept(ctx, p, ie, index)
    ]
    if lost:
        shown_paths = ", ".join(lost[:3]) + (f" and {len(lost) - 3} more" if len(lost) > 3 else "")
        fix = "use --hard to discard them" if only is None else "`mgit add` the working file over them first"
        raise DirtyWorktreeError(
            f"reset would drop staged changes in {shown_paths} that no commit or working file holds; "
            f"commit them, or {fix}"
        )
    patterns = load_patterns(ctx.git_dir)
    for p in sorted(only if only is not None else set(index.entries) | set(target_snap)):
        ie, entry = index.entries.get(p), target_snap.get(p)
        if ie is not None and ie.entry == entry:
            continue
        result.unstaged.append(p)
        if entry is None:
            del index.entries[p]  # the working file, if any, becomes untracked
            continue
        absent = not (ctx.root / p).exists()
        skip = absent and ie is not None and ie.skip_worktree  # not checked out stays so; else: deleted
        projection = workfiles.form(ctx, entry, p, patterns).projection(entry) if not absent else None
        index.entries[p] = IndexEntry(entry, skip_worktree=skip, projection=projection)


def _kept(ctx: Context, rel: str, ie: IndexEntry, index: Index) -> bool:
    """Does the working tree still hold what ``ie`` stages (so a mixed reset loses nothing)?"""
    if ie.skip_worktree and not (ctx.root / rel).exists():
        return False
    return clean(ctx, rel, ie.worktree, index)


def _reset_worktree(ctx: Context, index: Index, target_snap: Snapshot, result: ResetResult, plan: Journal) -> None:
    """``reset --hard``: every tracked file as ``target_snap`` has it (sparse patterns kept);
    files tracked but not in it are deleted, untracked ones are left alone. Journaled as a
    checkout is (``plan``: how HEAD moves), so a killed reset is finished by the next command."""
    patterns = load_patterns(ctx.git_dir)
    forms = {p: workfiles.form(ctx, e, p, patterns) for p, e in target_snap.items()}
    todo = {}
    for p, entry in target_snap.items():
        ie = index.entries.get(p)
        if ie is None or ie.entry != entry or shown(ie) != forms[p] or not holds(ctx, p, forms[p], index):
            todo[p] = entry
    plan.writes = {p: Write(e, forms[p].entry, forms[p].written) for p, e in todo.items()}
    plan.removes = sorted(set(index.entries) - set(target_snap))
    plan.patterns = patterns
    written = CheckoutResult(result.commit)
    checkout.write_files(ctx, index, todo, written, forms=forms, plan=plan)
    workfiles.complete(ctx, plan, index, written)
    result.written, result.removed = written.written, written.removed
