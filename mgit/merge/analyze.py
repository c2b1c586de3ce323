"""‖expert chunk − base chunk‖₂ for every candidate of a merge plan, from what is recorded.

First the commits' statistics: each commit on an expert's side of the history (not reachable
from the base) recorded, for every chunk it changed, the distance to its parent's chunk; when
that parent chunk is the merge base's chunk at the same place, the value is the one we need.
Then the local pair cache. Only the pairs neither knows are "analyzed": both chunks read
once, the distance computed and cached. Its reads are counted apart from the merge's, and
the values are the same whichever source gave them, so plans are deterministic.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mgit.graph.objects import Graph
from mgit.merge.plan import MergePlan
from mgit.model.dtypes import delta_l2, lookup
from mgit.parallel import ordered_map
from mgit.store.chunkstore import ChunkStore, ReadCounters
from mgit.store.paircache import PairCache

HISTORY_LIMIT = 1000  # commits per expert searched for recorded statistics

StatsOf = Callable[[str], dict[str, list]]  # commit id → path → [[chunk, parent chunk, ‖Δ‖], ...]


@dataclass
class Analysis:
    norms: dict[tuple[str, str], float | None]  # (expert chunk, base chunk) → ‖Δ‖
    pairs_analyzed: int = 0
    bytes_read: int = 0


def side_commits(graph: Graph, base: str, experts: list[str]) -> list[str]:
    """Commits reachable from the experts but not from the base (newest first, bounded)."""
    walker = graph.repo.get_walker(
        include=[e.encode() for e in experts], exclude=[base.encode()], max_entries=HISTORY_LIMIT * len(experts)
    )
    return [entry.commit.id.decode() for entry in walker]


def recorded_norms(commits: list[str], stats_of: StatsOf, wanted: set[tuple[str, str]]) -> dict:
    out: dict[tuple[str, str], float | None] = {}
    for commit in commits:
        for triples in stats_of(commit).values():
            for cid, parent, l2 in triples:
                for pair in ((cid, parent), (parent, cid)):
                    if pair in wanted:
                        out[pair] = l2
        if len(out) == len(wanted):
            break
    return out


def pair_norms(
    graph: Graph,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    cache: PairCache,
    plan: MergePlan,
    base: str,
    experts: list[str],
    stats_of: StatsOf,
) -> Analysis:
    """The distance of every candidate expert chunk to its base chunk (see the module doc)."""
    dtypes, wanted = {}, set()
    for tp in plan.tensors:
        for k, reads in enumerate(tp.reads):
            for i in reads:
                if i < len(tp.base.chunks) and tp.base.chunks[i].size == tp.experts[k].chunks[i].size:
                    pair = (tp.experts[k].chunks[i].id, tp.base.chunks[i].id)
                    wanted.add(pair)
                    dtypes[pair] = (tp.base.dtype, f"tensor {tp.name!r} in {tp.file}")
    analysis = Analysis(recorded_norms(side_commits(graph, base, experts), stats_of, wanted))
    left = wanted - set(analysis.norms)
    analysis.norms |= cache.get_many(left)
    todo = sorted(left - set(analysis.norms))
    if not todo:
        return analysis
    counters = ReadCounters()

    def measure(pair: tuple[str, str]) -> float | None:
        dtype, what = dtypes[pair]
        a = store.get(pair[0], what, counters=counters)
        b = store.get(pair[1], what, counters=counters)
        return delta_l2(a, b, lookup(dtype))

    computed = dict(zip(todo, ordered_map(pool, measure, todo), strict=True))
    cache.put_many({p: v for p, v in computed.items() if v is not None})
    analysis.norms |= computed
    analysis.pairs_analyzed = len(todo)
    analysis.bytes_read = counters.stored_bytes
    return analysis
