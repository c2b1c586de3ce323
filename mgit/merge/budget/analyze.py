"""‖expert chunk − base chunk‖₂ for every candidate of a merge plan, from what is recorded.

The commits' statistics first; pairs they lack are read ("analyzed", priced and capped so the
analysis never costs more than the merge) or estimated from the history or the manifests' norms,
keeping an upper bound so the plan's error bound stays a bound. Plans never depend on the pair
cache, so they are deterministic. The rules: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dulwich.objects import ObjectID

from mgit.errors import chunks_of
from mgit.graph.objects import Graph
from mgit.merge.io import Price
from mgit.merge.plan import MergePlan, TensorPlan
from mgit.model.dtypes import lookup
from mgit.model.stats import delta_l2
from mgit.parallel import ordered_map
from mgit.store.chunkstore import ChunkStore, ReadCounters
from mgit.store.paircache import PairCache

HISTORY_LIMIT = 1000  # commits per expert searched for recorded statistics
MAX_STEPS = 64  # recorded changes followed from a chunk towards the one it was changed from

StatsOf = Callable[[str], dict[str, list]]  # commit id → path → [[chunk, parent chunk, ‖Δ‖], ...]
Pair = tuple[str, str]  # (expert chunk, base chunk)
SOURCES = ("stats", "cache", "read", "estimated")  # where a ‖Δ‖ came from, most exact first


@dataclass
class Analysis:
    norms: dict[Pair, float | None]  # (expert chunk, base chunk) → ‖Δ‖ (estimated pairs: the estimate)
    upper: dict[Pair, float | None] = field(default_factory=dict)  # estimated pairs: ‖e‖ + ‖b‖
    sources: dict[str, int] = field(default_factory=lambda: dict.fromkeys(SOURCES, 0))
    cap: int = 0  # bytes analysis was allowed to read
    priced: int = 0  # bytes reading every pair the statistics lack would have read
    pairs_analyzed: int = 0  # read now
    bytes_read: int = 0
    estimated_from: dict[str, int] = field(default_factory=lambda: {"history": 0, "norms": 0})

    @property
    def mode(self) -> str:
        """The least exact source any ‖Δ‖ came from (``stats`` when every one was recorded)."""
        return next((s for s in reversed(SOURCES) if self.sources[s]), "stats")

    def to_json(self) -> dict:
        return {
            "mode": self.mode,
            "pairs": self.pairs_analyzed,
            "bytes_read": self.bytes_read,
            "cap_bytes": self.cap,
            "priced_bytes": self.priced,
            "pairs_by_source": dict(self.sources),
            "estimated_from": dict(self.estimated_from),
        }


def side_commits(graph: Graph, base: str, experts: list[str]) -> list[str]:
    """Commits reachable from the experts but not from the base, then those reachable from the
    base but not from the experts (each side newest first, bounded)."""
    ours, theirs = [ObjectID(e.encode()) for e in experts], [ObjectID(base.encode())]
    walker = graph.repo.get_walker(include=ours, exclude=theirs, max_entries=HISTORY_LIMIT * len(experts))
    base_side = graph.repo.get_walker(include=theirs, exclude=ours, max_entries=HISTORY_LIMIT)
    return [entry.commit.id.decode() for entry in (*walker, *base_side)]


def recorded_norms(commits: list[str], stats_of: StatsOf, wanted: set[Pair]) -> dict:
    out: dict[Pair, float | None] = {}
    for commit in commits:
        for triples in stats_of(commit).values():
            for cid, parent, l2 in triples:
                for pair in ((cid, parent), (parent, cid)):
                    if pair in wanted:
                        out[pair] = l2
        if len(out) == len(wanted):
            break
    return out


def norm_bounds(expert_l2: float | None, base_l2: float | None) -> tuple[float, float] | None:
    """(estimate, upper bound) of ‖e − b‖ from ‖e‖ and ‖b‖ (None: a norm unknown or not finite)."""
    if expert_l2 is None or base_l2 is None or not math.isfinite(expert_l2) or not math.isfinite(base_l2):
        return None
    return math.sqrt(abs(expert_l2 * expert_l2 - base_l2 * base_l2)), expert_l2 + base_l2


Steps = dict[str, tuple[str, float]]  # chunk → (the chunk it was changed from, ‖Δ‖)


def recorded_steps(commits: list[str], stats_of: StatsOf) -> Steps:
    """Every recorded change with a finite distance, newest first where a chunk has several."""
    steps: Steps = {}
    for commit in commits:
        for triples in stats_of(commit).values():
            for cid, parent, l2 in triples:
                if l2 is not None and math.isfinite(l2):
                    steps.setdefault(cid, (parent, l2))
    return steps


def _ancestry(cid: str, steps: Steps) -> dict[str, list[float]]:
    """The chunks ``cid`` descends from by recorded changes, each with the distances on the way."""
    out: dict[str, list[float]] = {cid: []}
    path: list[float] = []
    while cid in steps and len(path) < MAX_STEPS:
        cid, l2 = steps[cid]
        if cid in out:
            break
        path = [*path, l2]
        out[cid] = path
    return out


def history_bounds(expert: str, base: str, steps: Steps) -> tuple[float, float] | None:
    """(estimate, upper bound) of ‖e − b‖ along the recorded changes joining the two chunks
    (None: no common ancestor chunk): √Σ‖Δ_i‖² and Σ‖Δ_i‖ over the shortest such path."""
    ups, downs = _ancestry(expert, steps), _ancestry(base, steps)
    paths = [ups[c] + downs[c] for c in ups if c in downs]
    if not paths:
        return None
    path = min(paths, key=len)
    return math.sqrt(sum(x * x for x in path)), sum(path)


@dataclass
class _Want:
    dtype: str
    tensor: TensorPlan  # the (last) tensor the pair is of
    bounds: tuple[float, float] | None  # from the norms
    from_history: bool = False

    def join(self, history: tuple[float, float] | None) -> None:
        """Take the history's estimate where there is one, and the tighter upper bound."""
        if history is None:
            return
        upper = history[1] if self.bounds is None else min(history[1], self.bounds[1])
        self.bounds, self.from_history = (min(history[0], upper), upper), True


def _wanted(plan: MergePlan) -> dict[Pair, _Want]:
    out: dict[Pair, _Want] = {}
    for tp in plan.tensors:
        for k, reads in enumerate(tp.reads):
            for i in reads:
                if i < len(tp.base.chunks) and tp.base.chunks[i].size == tp.experts[k].chunks[i].size:
                    e, b = tp.experts[k].chunks[i], tp.base.chunks[i]
                    out[(e.id, b.id)] = _Want(tp.base.dtype, tp, norm_bounds(e.l2, b.l2))
    return out


def _within_cap(left: dict[Pair, _Want], price: Price, cap: int) -> tuple[list[Pair], int]:
    """The pairs to read (most changed first, each while its price fits) and the price of all."""
    order = sorted(left, key=lambda p: (-(left[p].bounds or (math.inf,))[0], p))
    chosen, spent, total = [], 0, 0
    for pair in order:
        cost = price(pair[1], set()) + price(pair[0], {pair[1]})
        total += cost
        if left[pair].bounds is not None and spent + cost <= cap:  # a non-finite chunk stays unknown
            chosen.append(pair)
            spent += cost
    return chosen, total


def pair_norms(
    graph: Graph,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    cache: PairCache,
    plan: MergePlan,
    base: str,
    experts: list[str],
    stats_of: StatsOf,
    cap: int,
    price: Price,
) -> Analysis:
    """The distance of every candidate expert chunk to its base chunk (see the module doc),
    reading at most ``cap`` stored bytes."""
    wanted = _wanted(plan)
    stats_of = functools.cache(stats_of)
    commits = side_commits(graph, base, experts)
    analysis = Analysis(recorded_norms(commits, stats_of, set(wanted)), cap=cap)
    analysis.sources["stats"] = len(analysis.norms)
    left = {p: w for p, w in wanted.items() if p not in analysis.norms}
    if left:
        steps = recorded_steps(commits, stats_of)
        for pair, want in left.items():
            want.join(history_bounds(pair[0], pair[1], steps))
    chosen, analysis.priced = _within_cap(left, price, cap)
    cached = cache.get_many(chosen)
    analysis.norms |= cached
    analysis.sources["cache"] = len(cached)
    todo = [p for p in chosen if p not in cached]
    counters = ReadCounters()

    def measure(pair: Pair) -> float | None:
        want = left[pair]
        with chunks_of(want.tensor.owner):
            b = store.get(pair[1], counters=counters)
            a = store.get(pair[0], known=lambda cid: b if cid == pair[1] else None, counters=counters)
        return delta_l2(a, b, lookup(want.dtype))

    computed = dict(zip(todo, ordered_map(pool, measure, todo), strict=True))
    cache.put_many({p: v for p, v in computed.items() if v is not None})
    analysis.norms |= computed
    analysis.sources["read"] = len(todo)
    analysis.pairs_analyzed = len(todo)
    analysis.bytes_read = counters.stored_bytes
    for pair in set(left) - set(chosen):
        bounds = left[pair].bounds
        analysis.norms[pair] = None if bounds is None else bounds[0]
        analysis.upper[pair] = None if bounds is None else bounds[1]
        analysis.estimated_from["history" if left[pair].from_history else "norms"] += bounds is not None
    analysis.sources["estimated"] = len(left) - len(chosen)
    return analysis
