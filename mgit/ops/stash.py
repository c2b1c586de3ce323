"""`stash`: set the working-tree changes aside as commits, as git does, and bring them back.

An entry is two commits made by add's machinery (the index ``I``, the working files ``W``);
applying writes ``W`` back where HEAD still holds the stash's base, else merges it onto HEAD
three-way, and a conflict changes nothing. Details: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

from dataclasses import dataclass

from dulwich.reflog import format_reflog_line

from mgit.context import Context
from mgit.durable import atomic_write
from mgit.errors import BadInputError, MgitError, RefUpdateError
from mgit.graph import records
from mgit.graph.ids import object_id, ref_name
from mgit.graph.refs import reflog_entries
from mgit.graph.snapshot import Entry, Snapshot
from mgit.model.filetree import chunked_parents
from mgit.ops import checkout, reset, stage, workfiles
from mgit.ops.paths import listed
from mgit.ops.threeway import STASH_KEPT, BranchMerge, ConflictPolicy, Sides, three_way
from mgit.ops.workfiles import CheckoutResult
from mgit.worktree.index import Index
from mgit.worktree.journal import Journal, Staged, Write
from mgit.worktree.sparse import load_patterns

STASH = "refs/stash"
ZERO = "0" * 40


@dataclass(frozen=True)
class StashEntry:
    """``stash@{position}``: the ``commit`` (W) and its reflog message."""

    position: int
    commit: str
    message: str


def stash_list(ctx: Context) -> list[StashEntry]:
    """Every stash entry, newest first, as ``git stash list`` lists them.

    Returns:
        Each entry's position (``stash@{0}`` first), commit and message.
    """
    entries = reflog_entries(ctx.git_dir, STASH)
    return [
        StashEntry(n, e.new_sha.decode(), e.message.decode("utf-8", "replace")) for n, e in enumerate(reversed(entries))
    ]


def stash(ctx: Context, message: str | None = None) -> str | None:
    """Put local changes aside (``stash push``) to work on a clean tree.

    The staged and unstaged changes of tracked files become a new stash entry, then the index
    and working tree are reset to HEAD (untracked files stay).

    Args:
        message: The entry's message (default: git's ``WIP on BRANCH: …``).

    Returns:
        The entry's commit, or None when there is nothing to stash (git's "No local changes
        to save").

    Raises:
        BadInputError: No commit yet.
        RefUpdateError: ``refs/stash`` moved meanwhile; nothing was stashed.
    """
    with ctx.writing():
        head = ctx.refs.head()
        if head is None:
            raise BadInputError("nothing to stash before the first commit (commit something first)")
        index = ctx.index()
        head_snap = ctx.head_snapshot()
        worked = Index(index.path, dict(index.entries))  # staged into a copy: the index stays as it is
        stage.stage_into(
            ctx,
            worked,
            list(index.entries),
            stage.parent_lookup(ctx, head_snap),
            stage.AddResult(),
            chunked_parents(ctx.graph, head_snap),
        )
        if index.snapshot() == head_snap and worked.snapshot() == head_snap:
            return None
        ctx.store.seal()  # chunks are visible before any commit names them
        branch = ctx.refs.current_branch() or "(no branch)"
        info = ctx.graph.commit(head)
        where = f"{branch}: {head[:12]} {info.summary}"
        who = ctx.identity()
        on_index = ctx.graph.put_commit(stage.index_tree(ctx, index, head_snap), [head], f"index on {where}", who, who)
        text = f"On {branch}: {message.strip()}" if message and message.strip() else f"WIP on {where}"
        made = ctx.graph.put_commit(stage.index_tree(ctx, worked, head_snap), [head, on_index], text, who, who)
        old = stash_list(ctx)
        _move_stash(ctx, old[0].commit if old else None, made, text)
        reset.reset(ctx, "HEAD", mode="hard")  # journaled: a killed reset is finished, the entry already kept
        return made


def stash_apply(ctx: Context, position: int = 0, index: bool = False) -> CheckoutResult:
    """Bring a stash entry's changes back into the working tree; the entry stays.

    Where HEAD changed a path the stash changed since it was made, the stash is merged onto
    HEAD three-way. A refused apply changes nothing.

    Args:
        position: The entry (``stash@{position}``).
        index: Restore the index exactly as it was too.

    Returns:
        The files written and removed.

    Raises:
        MergeConflictError: The stash and HEAD changed the same thing differently.
        BadInputError: No such entry.
        MgitError: ``index`` on a moved HEAD, or an entry that is no stash commit.
        DirtyWorktreeError: Local changes in the way.
    """
    with ctx.writing():
        entry = _entry(ctx, position)
        made = ctx.graph.commit(entry.commit)
        if len(made.parents) < 2:
            raise MgitError(f"stash@{{{position}}} ({entry.commit[:12]}) is not a stash commit")
        base, on_index = ctx.snapshot(made.parents[0]), ctx.snapshot(made.parents[1])
        work = ctx.snapshot(entry.commit)
        changed = sorted(p for p in {*base, *on_index, *work} if not base.get(p) == on_index.get(p) == work.get(p))
        head_snap = ctx.head_snapshot()
        moved = [p for p in changed if head_snap.get(p) != base.get(p)]
        if moved:
            if index:
                raise MgitError(
                    f"HEAD changed {listed(moved)} since stash@{{{position}}} was made on {made.parents[0][:12]}; "
                    "--index restores the index only where HEAD still holds the stash's base: apply without "
                    "--index to merge the stash into the working tree (the stash is kept)"
                )
            work = _merged_onto_head(ctx, made.parents[0], entry.commit, position)
            ctx.store.seal()  # the chunks of a merged large file are visible before the journal names them
            base = head_snap
            changed = sorted(p for p in {*head_snap, *work} if head_snap.get(p) != work.get(p))
        current = ctx.index()
        workfiles.refuse_local_changes(ctx, current, head_snap, set(changed), "stash apply", STASH_KEPT)
        patterns = load_patterns(ctx.git_dir)
        forms = {p: workfiles.form(ctx, work[p], p, patterns) for p in changed if p in work}
        plan = Journal(
            "stash apply",
            f"stash@{{{position}}}",
            entry.commit,
            writes={p: Write(work[p], f.entry, f.written) for p, f in forms.items()},
            removes=[p for p in changed if p not in work],
            staged=_index_after(ctx, entry.commit, changed, base, work, index),
        )
        result = CheckoutResult(entry.commit)
        checkout.write_files(ctx, current, {p: work[p] for p in forms}, result, forms=forms, plan=plan)
        workfiles.complete(ctx, plan, current, result)  # the index as the journal says, as recovery sets it
        return result


def _index_after(
    ctx: Context, stash: str, changed: list[str], base: Snapshot, work: Snapshot, exact: bool
) -> dict[str, Staged]:
    """What the index stages at each path the apply changes (``exact``: the stash's index;
    else git's treatment: ``work`` is what the files will hold, ``base`` what HEAD holds), with
    the chunk statistics the stash recorded for that entry. Decided before anything is written
    and kept in the journal, so that a killed apply is finished alike."""
    made = ctx.graph.commit(stash)
    stashed, on_index = ctx.snapshot(stash), ctx.snapshot(made.parents[1])
    work_stats = records.read_stats(ctx.graph, made.tree)
    index_stats = records.read_stats(ctx.graph, ctx.graph.commit(made.parents[1]).tree)
    out = {}
    for p in changed:
        staged = on_index.get(p) if exact else _git_staged(p, base, on_index, work)
        stats = work_stats.get(p) if staged == stashed.get(p) else None
        if staged == on_index.get(p):
            stats = stats or index_stats.get(p)
        out[p] = Staged(staged, records.put_file_stats(ctx.graph, stats) if stats and staged else None)
    return out


def _merged_onto_head(ctx: Context, stash_base: str, stash: str, position: int) -> Snapshot:
    """HEAD moved at paths the stash changed: the stash's change merged onto HEAD three-way, as
    git's stash apply does (each path and tensor from the side that changed it; text files by
    lines). Conflicts raise MergeConflictError and change nothing: the stash is kept."""
    head = ctx.refs.head()
    assert head is not None  # a stash is made on a commit, and HEAD has moved from it
    name, branch = f"stash@{{{position}}}", ctx.refs.current_branch()
    made = BranchMerge("merged", name, stash, head, branch, stash, [stash_base], op="stash apply")
    sides = Sides.of(ctx, [stash_base], head, stash, ("HEAD", name))
    return three_way(ctx, sides, ConflictPolicy.of(), made).tree.merged


def stash_drop(ctx: Context, position: int = 0) -> str:
    """Forget a stash entry; its commits stay until gc finds nothing else keeps them.

    ``refs/stash`` moves to the next newest, or goes with the last one. The ref moves first, by
    compare-and-swap: a lost swap changes nothing. The reflog is then replaced whole, durably
    (a kill leaves the old log or the new); if that fails the ref goes back, so that ref and
    log never disagree on the newest entry.

    Args:
        position: The entry (``stash@{position}``).

    Returns:
        The dropped entry's commit.

    Raises:
        BadInputError: No such entry.
        RefUpdateError: ``refs/stash`` moved meanwhile; nothing was dropped.
    """
    with ctx.lock:
        entry = _entry(ctx, position)
        path = ctx.git_dir / "logs" / STASH
        kept = [e for n, e in enumerate(reversed(reflog_entries(ctx.git_dir, STASH))) if n != position][::-1]
        refs, name = ctx.graph.repo.refs, ref_name(STASH.encode())
        dropped = object_id(entry.commit.encode())
        if not kept:
            if not refs.remove_if_equals(name, dropped):
                raise RefUpdateError(f"{STASH} moved while this command ran; run it again")
            path.unlink(missing_ok=True)
            return entry.commit
        lines = []
        for i, e in enumerate(kept):  # each entry's old is the one before it, as git rewrites them
            old = kept[i - 1].new_sha if i else ZERO.encode()
            lines.append(format_reflog_line(old, e.new_sha, e.committer, e.timestamp, e.timezone, e.message) + b"\n")
        newest = object_id(kept[-1].new_sha)
        if position == 0 and not refs.set_if_equals(name, dropped, newest):
            raise RefUpdateError(f"{STASH} moved while this command ran; run it again")
        try:
            atomic_write(path, b"".join(lines))
        except BaseException:
            if position == 0:
                refs.set_if_equals(name, newest, dropped)
            raise
        return entry.commit


def stash_pop(ctx: Context, position: int = 0, index: bool = False) -> CheckoutResult:
    """Apply a stash entry, then drop it (``stash pop``); a refused apply keeps it.

    Args:
        position: As :func:`stash_apply`'s.
        index: As :func:`stash_apply`'s.

    Returns:
        What :func:`stash_apply` returns.

    Raises:
        RefUpdateError: ``refs/stash`` moved meanwhile; and the errors of :func:`stash_apply`.
    """
    with ctx.lock:
        result = stash_apply(ctx, position, index)
        stash_drop(ctx, position)
        return result


def _entry(ctx: Context, position: int) -> StashEntry:
    entries = stash_list(ctx)
    if not entries:
        raise BadInputError("no stash entries (make one with `mgit stash`)")
    if not 0 <= position < len(entries):
        raise BadInputError(f"stash@{{{position}}} does not exist: there are {len(entries)} stash entries")
    return entries[position]


def _move_stash(ctx: Context, old: str | None, new: str, message: str) -> None:
    """``refs/stash`` to the new entry, logged (the entry is its reflog line)."""
    refs, name = ctx.graph.repo.refs, ref_name(STASH.encode())
    who = ctx.identity()
    if old is None:
        ok = refs.add_if_new(name, object_id(new.encode()), committer=who, message=message.encode())
    else:
        ok = refs.set_if_equals(
            name, object_id(old.encode()), object_id(new.encode()), committer=who, message=message.encode()
        )
    if not ok:
        raise RefUpdateError(f"{STASH} moved while this command ran; nothing was stashed, run it again")


def _git_staged(p: str, base: Snapshot, on_index: Snapshot, work: Snapshot) -> Entry | None:
    """What git's stash apply (without --index) stages at ``p``: the base's entry (a staged
    change becomes an unstaged one), except a file new in the stash's index, which stays
    added with its working content."""
    if p not in base and p in on_index and p in work:
        return work[p]
    return base.get(p)
