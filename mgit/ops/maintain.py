"""Maintenance: gc (what nothing reaches), fsck and its repair (from the working tree and
the remotes), du and the store's usage, reflog expiry, the leftovers of killed commands.
The work is mgit.maintenance's; here it is framed by the lock and the store's sealing."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field

from mgit.context import Context
from mgit.graph.refs import expire_reflogs
from mgit.lock import remove_stale_git_locks, warn
from mgit.maintenance.du import StoreUsage, Usage, commit_usage, measure_store
from mgit.maintenance.fsck import bad_chunks, check_repository
from mgit.maintenance.gc import DEFAULT_GRACE_SECONDS, GcReport, collect, leftover_files
from mgit.maintenance.reach import reachable
from mgit.maintenance.repair import (
    GraphRepair,
    Remotes,
    drop_lost_index_stats,
    restore_objects,
    restore_refs,
    settle,
)
from mgit.model.ingest import recover_chunks
from mgit.ops import remotes
from mgit.store import pack_health
from mgit.store.gc import repack
from mgit.worktree.scan import walk


@dataclass
class Repair:
    """What ``fsck --repair`` did."""

    rebuilt_indexes: list[str] = field(default_factory=list)  # packs whose damaged index was rebuilt
    dropped: dict[str, str] = field(default_factory=dict)  # damaged chunk → why
    from_worktree: int = 0  # chunks stored again from working files
    from_remotes: dict[str, int] = field(default_factory=dict)  # remote → chunks fetched
    missing: dict[str, str] = field(default_factory=dict)  # still missing chunk → who needs it
    rewritten_packs: list[str] = field(default_factory=list)  # damaged packs rewritten from their good records
    graph: GraphRepair = field(default_factory=GraphRepair)  # git objects and refs restored or still lost


def gc(ctx: Context, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> GcReport:
    """Reclaim space: remove what no ref, reflog entry or the index reaches.

    First the sketches of commits nothing else keeps; then unreachable git objects and chunks
    (packs rewritten) and the temporary files killed commands left.

    Args:
        grace_seconds: Keep what is younger than this (another process may be about to refer
            to it).

    Returns:
        The objects, chunks, leftovers and sketches removed, and the packs' size before and after.

    Raises:
        LockedError: Another mgit process holds the repository.
    """
    from mgit.ops import sketch

    with ctx.writing():
        ctx.clear_staging()  # what a killed merge staged
        remove_stale_git_locks(ctx.git_dir, warn)  # the object directories too
        orphans = sketch.drop_orphans(ctx, grace_seconds)
        return dataclasses.replace(collect(ctx.graph, ctx.store, ctx.index(), grace_seconds), sketches_removed=orphans)


def fsck_repair(ctx: Context) -> Repair:
    """Repair what :func:`fsck` finds, from every source that still holds it (``fsck --repair``).

    Damaged or missing git objects come from the remotes, damaged refs from their reflogs or
    the remotes (:mod:`mgit.maintenance.repair`); damaged packs are rewritten from their
    readable records, dropping chunks that fail verification; then every chunk the history
    needs and lacks is stored again from the working tree's files and the remotes (verified
    like any fetch). In a partial clone only dropped chunks are sought.

    Returns:
        What was rebuilt, dropped, restored and from where, and what no source holds (with
        who needs it).

    Raises:
        LockedError: Another mgit process holds the repository.
    """
    with ctx.writing():
        graph_repair = _repair_graph(ctx)
        rebuilt = pack_health.rebuild_damaged_indexes(ctx.store)
        bad = bad_chunks(ctx.store, ctx.pool)
        damaged_packs = pack_health.damaged_packs(ctx.store)
        if bad or damaged_packs:  # a damaged base is dropped too, though deltas need it: fetched below
            repack(ctx.store, ctx.store.ids() - set(bad), grace_seconds=0, force=True, drop=set(bad))
        reach = reachable(ctx.graph, ctx.index())
        missing = {c: who for c, who in reach.chunks.items() if not ctx.store.has(c, refresh=False)}
        if ctx.is_partial:
            missing = {c: who for c, who in missing.items() if c in bad}
        for base, child in pack_health.absent_bases(ctx.store).items():
            missing.setdefault(base, f"chunk {child[:12]} (stored as a delta of it)")
        files = walk(ctx.root)
        from_tree = recover_chunks(ctx.root, sorted(files), set(missing), ctx.store, ctx.pool)
        from_remotes = remotes.recover_from_remotes(ctx, set(missing) - from_tree)
        recovered = from_tree | {c for got in from_remotes.values() for c in got}
        return Repair(
            rebuilt_indexes=rebuilt,
            dropped=bad,
            from_worktree=len(from_tree),
            from_remotes={name: len(got) for name, got in from_remotes.items()},
            missing={c: who for c, who in missing.items() if c not in recovered},
            rewritten_packs=damaged_packs,
            graph=graph_repair,
        )


def _repair_graph(ctx: Context) -> GraphRepair:
    """Git objects from the remotes, then refs (their reflog, tracking refs, the remotes)."""
    report = GraphRepair()
    sources = Remotes({name: functools.partial(remotes.backend, ctx, name) for name in remotes.remotes(ctx)})
    try:
        restore_objects(ctx.graph, ctx.index(), sources, report)
        restore_refs(ctx.graph, sources, ctx.identity(), report)
        if report.refs:  # restored refs may name commits whose objects are elsewhere
            restore_objects(ctx.graph, ctx.index(), sources, report)
        drop_lost_index_stats(ctx.index(), report)
        settle(ctx.graph, ctx.index(), report)
    finally:
        sources.close()
    ctx.graph._cache.clear()
    return report


def fsck(ctx: Context) -> list[str]:
    """Check the whole repository: every object, ref, pack and chunk the history needs.

    In a partial clone, chunks not fetched yet are not problems. Git lock files a killed mgit
    left are not problems either: taking the lock removes them (each with a warning).

    Returns:
        Every problem found, one line each (empty: the repository is whole).
    """
    with ctx.lock:
        remove_stale_git_locks(ctx.git_dir, warn)
        return check_repository(ctx.graph, ctx.store, ctx.index(), ctx.pool, ctx.is_partial)


def leftovers(ctx: Context) -> list[str]:
    """Temporary files a killed command left in ``.mgit`` (a killed ``fsck --repair``'s objects).

    Not damage: nothing reads them; gc removes them after its grace period.

    Returns:
        Their paths.
    """
    return [p.relative_to(ctx.root).as_posix() for p in leftover_files(ctx.git_dir)]


def du(ctx: Context, rev: str = "HEAD") -> Usage:
    """What a revision takes: its logical size, its distinct chunks, and what they take stored.

    Args:
        rev: The revision.

    Returns:
        Logical, unique and stored bytes, the chunks, and what is new against the first parent.

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    return commit_usage(ctx.graph, ctx.store, ctx.refs.resolve(rev))


def store_usage(ctx: Context) -> StoreUsage:
    """What the whole chunk store holds, for ``du --store``.

    Returns:
        Packs, chunks, raw and stored bytes, and the chunks of each encoding.
    """
    return measure_store(ctx.store)


def reflog_expire(ctx: Context, days: float | None = 90) -> int:
    """Forget old reflog entries, so gc may reclaim what only they kept alive.

    What only they kept: commits of deleted branches, amended history.

    Args:
        days: Forget entries older than this many days (None: all of them).

    Returns:
        How many entries were forgotten.
    """
    with ctx.lock:
        return expire_reflogs(ctx.git_dir, None if days is None else time.time() - days * 86400)
