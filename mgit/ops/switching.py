"""`switch` and `restore`, git's two halves of checkout, as thin operations over the checkout
and reset machinery: switch moves HEAD (to a branch, a new branch, or detached), restore
brings paths of the working tree and/or the index back from the index or a revision."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from mgit.context import Context
from mgit.errors import BadInputError, MgitError
from mgit.graph.snapshot import Entry, Snapshot
from mgit.ops import checkout, remotes, reset
from mgit.ops.paths import prune_dirs, under
from mgit.ops.workfiles import CheckoutResult
from mgit.worktree.index import Index


def switch(
    ctx: Context,
    branch: str | None = None,
    *,
    create: str | None = None,
    start: str | None = None,
    detach: bool = False,
    force: bool = False,
) -> CheckoutResult:
    """Switch branches, as ``git switch`` does (checkout without its path form).

    Args:
        branch: The branch to switch to (a remote's branch of that name, ``origin/branch``,
            makes the local one, as git guesses); with ``detach``, any revision.
        create: Create this branch at ``start`` and switch to it (``-c``).
        start: Where ``create`` starts (default HEAD).
        detach: Detach HEAD at ``branch`` (none: where HEAD is, as git).
        force: Discard local changes in the way.

    Returns:
        The commit checked out and the files written and removed.

    Raises:
        BadInputError: No such branch (a revision that is no branch, without ``detach``), or
            options that do not go together.
        DirtyWorktreeError: Local changes in the way (without ``force``).
    """
    if create is not None:
        if branch is not None or detach:
            raise BadInputError("switch -c NEW [START]: give the start as START, without --detach")
        return checkout.checkout(ctx, start or "HEAD", create_branch=create, force=force)
    if detach:
        return checkout.checkout(ctx, ctx.refs.resolve(branch or "HEAD"), force=force)  # an id: never a branch
    if branch is None:
        raise BadInputError("switch needs a branch (or -c NEW, or --detach [REV])")
    if branch not in ctx.refs.branches() and remotes.remote_branch_for(ctx, branch) is None:
        try:
            commit = ctx.refs.resolve(branch)
        except MgitError:
            raise BadInputError(f"no branch {branch!r}; create it with `mgit switch -c {branch}`") from None
        raise BadInputError(
            f"a branch is expected, got {branch!r} ({commit[:12]}); to look at it without a branch, "
            f"run `mgit switch --detach {branch}`"
        )
    return checkout.checkout(ctx, branch, force=force)


@dataclass
class RestoreResult:
    """What ``restore`` did: working files ``written`` and ``removed``; index entries reset
    (``unstaged``, with ``staged``)."""

    source: str | None  # the commit restored from (None: the index)
    written: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    unstaged: list[str] = field(default_factory=list)


def restore(
    ctx: Context,
    paths: Iterable[str | os.PathLike[str]],
    source: str | None = None,
    staged: bool = False,
    worktree: bool | None = None,
) -> RestoreResult:
    """Restore working files or index entries, as ``git restore PATHS`` does.

    As git's restore, a tracked path the source lacks is removed. The index changes only with
    ``staged``; staged changes no commit and no working file holds are refused (as
    ``reset -- PATH`` refuses them) unless the working files are restored too.

    Args:
        paths: The files or directories to restore.
        source: The revision to restore from (default: the index; with ``staged``, HEAD).
        staged: Restore the index entries instead of the working files.
        worktree: With ``staged``, the working files as well (default: not; without
            ``staged``, always).

    Returns:
        The working files written and removed and the index entries reset.

    Raises:
        BadInputError: No paths, a path matching nothing, or nothing to restore.
        DirtyWorktreeError: Staged changes that would be lost.
    """
    paths = list(paths)
    if not paths:
        raise BadInputError("restore needs at least one path")
    worktree = not staged if worktree is None else worktree
    if not (staged or worktree):
        raise BadInputError("restore of neither the working files nor the index (--staged) restores nothing")
    with ctx.lock:
        if staged and not worktree:
            res = reset.reset(ctx, source or "HEAD", paths=paths)
            return RestoreResult(ctx.refs.resolve(source) if source else res.commit, unstaged=res.unstaged)
        index = ctx.index()
        commit = ctx.refs.resolve(source or "HEAD") if (source or staged) else None
        snap = ctx.snapshot(commit) if commit else index.snapshot()
        todo, gone = _named(ctx, index, snap, paths, source or "HEAD" if commit else None)
        result = RestoreResult(commit)
        if staged:
            before = {p: ie.entry for p, ie in index.entries.items()}
            result.unstaged = sorted(p for p in {*todo, *gone} if before.get(p) != todo.get(p))
        scratch = index if staged else Index(index.path, dict(index.entries))  # the index stays
        written = CheckoutResult(commit)
        checkout.write_files(ctx, scratch, todo, written)
        result.written = written.written
        if not staged:
            _refresh_unchanged(index, scratch, written.written)
        for p in gone:
            if staged:
                index.entries.pop(p, None)
            if (ctx.root / p).is_file():
                (ctx.root / p).unlink()
                prune_dirs(ctx.root, p)
                result.removed.append(p)
        index.save()
        return result


def _named(
    ctx: Context, index: Index, snap: Snapshot, paths: list[str | os.PathLike[str]], where: str | None
) -> tuple[dict[str, Entry], list[str]]:
    """The entries of ``snap`` at or below each path, and the tracked paths there that ``snap``
    lacks (restore removes them, as git's); a path matching neither is refused."""
    todo: dict[str, Entry] = {}
    gone: set[str] = set()
    for p in paths:
        rel = ctx.relpath(p)
        hits, tracked = under(snap, rel), under(index.entries, rel)
        if not hits and not tracked:
            source = f"the index or {where}" if where else "the index"
            raise BadInputError(f"pathspec {rel or '.'!r} did not match any file in {source}")
        todo.update({h: snap[h] for h in hits})
        gone.update(t for t in tracked if t not in snap)
    return todo, sorted(gone)


def _refresh_unchanged(index: Index, scratch: Index, written: list[str]) -> None:
    """A working file written with what the index stages gets the new stat in the index (its
    staged statistics kept); others keep their entry, whose old stat no longer matches the file."""
    for p in written:
        real, fresh = index.entries.get(p), scratch.entries[p]
        if real is not None and real.entry == fresh.entry:
            index.entries[p] = replace(fresh, stats=real.stats)
            if p in scratch.unsettled:
                index.unsettled.add(p)
