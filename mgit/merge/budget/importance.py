"""Budgeted merges: which expert chunks are worth reading, decided without reading tensors.

A candidate's cost is the stored bytes its read touches; its importance |a_k|·‖Δ_k,c‖, valued
squared by the knapsack (errors at disjoint chunks add in squares). For affine methods the
skipped importances bound the error, plus a rounding allowance. The derivation: docs/merging.md,
"Notes from the code".
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from mgit.errors import BudgetExceededError
from mgit.merge.budget.knapsack import Item, choose_by_density, choose_uniform, fractional_bound
from mgit.merge.methods.base import Weights
from mgit.merge.plan import MergePlan, TensorPlan

SELECTIONS = ("importance", "uniform")
# How a budget is shared among the experts: "global" ranks every expert's chunks together (the
# experts with the largest deltas are taken first); "per-expert" gives each expert the budget's
# share of its own bytes first, then spends what is left globally.
FAIRNESS = ("global", "per-expert")
# Unit roundoff (half an ulp at 1) of each floating dtype.
_UNIT_ROUNDOFF = {"F64": 2.0**-53, "F32": 2.0**-24, "F16": 2.0**-11, "BF16": 2.0**-8, "F8_E4M3": 2.0**-4}
_COARSEST = 2.0**-3  # F8_E5M2 and anything unknown

PairNorms = Mapping[tuple[str, str], float | None]
Upper = Mapping[tuple[str, str], float | None]  # estimated pairs: an upper bound of ‖Δ‖ (None: none)


def gamma_n(n: int, u: float) -> float:
    """Higham's γ_n = n·u / (1 − n·u): the relative error of n roundings of unit roundoff u."""
    return n * u / (1 - n * u) if n * u < 1 else math.inf


def unit_roundoff(*dtypes: str | None) -> float:
    return max(_UNIT_ROUNDOFF.get(d, _COARSEST) for d in dtypes if d is not None)


@dataclass
class Candidate:
    tensor: int  # index into MergePlan.tensors
    expert: int
    chunk: int
    cost: int  # bytes, every pass included
    norm: float | None  # ‖Δ_k,c‖ (or its estimate); None: unknown or not finite (always read)
    weight: float  # |a_k|
    upper: float | None = None  # an estimated norm's upper bound (None: the norm is exact)

    @property
    def importance(self) -> float:
        return math.inf if self.norm is None else self.weight * self.norm

    @property
    def bound(self) -> float:
        """|a_k| · (an upper bound of ‖Δ_k,c‖): what skipping this candidate may change."""
        if self.norm is None:
            return 0.0  # always read
        return self.weight * (self.norm if self.upper is None else self.upper)


def candidates(
    plan: MergePlan, weights_for: Callable[[TensorPlan], Weights], norms: PairNorms, upper: Upper | None = None
) -> list[Candidate]:
    """Every expert chunk a full merge reads, with its cost and importance."""
    upper = upper or {}
    out = []
    for t, tp in enumerate(plan.tensors):
        weights = weights_for(tp)
        for k, reads in enumerate(tp.reads):
            for i, cost in zip(reads, tp.costs[k], strict=True):
                same_place = i < len(tp.base.chunks) and tp.base.chunks[i].size == tp.experts[k].chunks[i].size
                pair = (tp.experts[k].chunks[i].id, tp.base.chunks[i].id) if same_place else None
                norm, bound = (norms.get(pair), upper.get(pair)) if pair else (None, None)
                out.append(Candidate(t, k, i, plan.expert_passes * cost, norm, abs(weights.experts[k]), bound))
    return out


def best_share(cands: list[Candidate], limit: int | None) -> float:
    """The largest captured share any choice of chunks within ``limit`` can reach (those of
    unknown importance read first, the rest bounded by the fractional knapsack)."""
    energy = math.fsum(c.importance**2 for c in cands if c.norm is not None)
    if limit is None or energy == 0 or sum(c.cost for c in cands) <= limit:
        return 1.0  # everything read: summed in another order the bound could fall an ulp short
    left = limit - sum(c.cost for c in cands if c.norm is None)
    items = [Item(c.cost, c.importance**2) for c in cands if c.norm is not None]
    return min(1.0, fractional_bound(items, max(left, 0)) / energy)


def left_after_forced(cands: list[Candidate], limit: int) -> int:
    """What ``limit`` leaves once the candidates of unknown importance are read (they cannot be
    ranked, so they are never dropped); a budget below them is refused."""
    need = sum(c.cost for c in cands if c.norm is None)
    if need > limit:
        raise BudgetExceededError(
            f"the budget ({limit} bytes) is below the {need} bytes of expert chunks whose change is unknown "
            "(not finite, or chunked unlike the base): raise --budget"
        )
    return limit - need


def choose(cands: list[Candidate], limit: int | None, select: str, seed: int, fairness: str = "global") -> list[bool]:
    """Which candidates to read: all without a limit; otherwise those of unknown importance
    first (they cannot be ranked, so never silently dropped), then the knapsack's choice
    (``fairness="per-expert"``: within each expert's share first, see :func:`_per_expert`)."""
    if limit is None:
        return [True] * len(cands)
    forced = [c.norm is None for c in cands]
    left = left_after_forced(cands, limit)
    rest = [n for n, f in enumerate(forced) if not f]
    items = [Item(cands[n].cost, cands[n].importance ** 2) for n in rest]

    def pick(subset: list[Item], budget: int) -> list[bool]:
        return choose_by_density(subset, budget) if select == "importance" else choose_uniform(subset, budget, seed)

    if fairness == "per-expert":
        picked = _per_expert(items, [cands[n].expert for n in rest], left, pick)
    else:
        picked = pick(items, left)
    taken = list(forced)
    for n, p in zip(rest, picked, strict=True):
        taken[n] = p
    return taken


def _per_expert(
    items: list[Item], experts: list[int], limit: int, pick: Callable[[list[Item], int], list[bool]]
) -> list[bool]:
    """Each expert first gets the budget's share of its own candidate bytes (its chunks chosen
    within that by ``pick``), so no expert is left at the base because others' deltas are
    larger; then what the experts' shares left unspent goes to the remaining chunks, chosen
    by ``pick`` among all of them."""
    total = sum(i.cost for i in items)
    if total <= limit:
        return [True] * len(items)
    taken = [False] * len(items)
    spent = 0
    for k in sorted(set(experts)):
        mine = [n for n, e in enumerate(experts) if e == k]
        share = sum(items[n].cost for n in mine) * limit // total
        for n, p in zip(mine, pick([items[n] for n in mine], share), strict=True):
            if p:
                taken[n] = True
                spent += items[n].cost
    rest = [n for n in range(len(items)) if not taken[n]]
    for n, p in zip(rest, pick([items[n] for n in rest], limit - spent), strict=True):
        taken[n] = p
    return taken
