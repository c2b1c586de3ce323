"""A plan restricted to a budget: which expert chunks to read, as a NEW plan and its report.

The plan a full merge would read is left as it is (a caller may compare, re-plan or explain
it); :func:`restrict` returns a copy whose per-expert reads are the chosen chunks only, the
others listed as skipped (read as the base's), and the :class:`~mgit.merge.budget.report.BudgetReport`
saying what was chosen and how much of the full merge it keeps (see :mod:`mgit.merge.budget.importance`).
What a method contributes comes from its declarations: its effective weights rank the chunks,
and only an affine method gets an error bound.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping
from typing import Any

from mgit.errors import BadInputError
from mgit.merge.budget.analyze import Analysis
from mgit.merge.budget.importance import (
    FAIRNESS,
    SELECTIONS,
    Candidate,
    best_share,
    candidates,
    choose,
    gamma_n,
    unit_roundoff,
)
from mgit.merge.budget.report import BudgetReport, TensorBudget
from mgit.merge.budget.resolutions import Uses, best_share_with_sketches, choose_with_sketches
from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.plan import MergePlan, TensorPlan
from mgit.merge.sketch.record import sketchable
from mgit.merge.sketch.use import SketchOffer


def check_selection(select: str, fairness: str = "global") -> None:
    if select not in SELECTIONS:
        raise BadInputError(f"unknown budget selection {select!r} (known: {', '.join(SELECTIONS)})")
    if fairness not in FAIRNESS:
        raise BadInputError(f"unknown budget fairness {fairness!r} (known: {', '.join(FAIRNESS)})")


def restrict(
    plan: MergePlan,
    method: MergeMethod,
    params_of: Callable[[TensorPlan], Mapping[str, Any]],
    analysis: Analysis,
    *,
    given: str | None,
    limit: int | None,
    select: str,
    seed: int,
    dtypes: tuple[str | None, str | None] = (None, None),
    fairness: str = "global",
    offers: Mapping[tuple[int, int], SketchOffer] | None = None,
) -> tuple[MergePlan, BudgetReport]:
    """The plan reading only the expert chunks ``limit`` bytes afford (all without a limit),
    most important first (``select="uniform"``: at random, seeded; ``fairness="per-expert"``:
    within each expert's share of the budget first), and its report.
    ``params_of(tp)``: one tensor's resolved parameters; ``analysis``: every candidate's ‖Δ‖;
    ``dtypes``: the merge's working and output dtypes (for the rounding allowance);
    ``offers``: (tensor index, expert) → that expert tensor's stored sketch, which the budget
    may read instead of its chunks (mgit.merge.budget.resolutions; importance selection only)."""
    check_selection(select, fairness)

    def weights_for(tp: TensorPlan) -> Weights:
        return method.effective_weights(params_of(tp), len(tp.experts))

    def roundoff_for(tp: TensorPlan) -> float:
        return unit_roundoff(tp.base.dtype, *dtypes)

    report = BudgetReport(given, limit, select, plan.expert_bytes, fairness=fairness)
    n_experts = max((len(tp.experts) for tp in plan.tensors), default=0)
    report.expert_energy, report.expert_captured = [0.0] * n_experts, [0.0] * n_experts
    report.analyze_pairs, report.analyze_bytes = analysis.pairs_analyzed, analysis.bytes_read
    report.analyze = analysis.to_json()
    cands = candidates(plan, weights_for, analysis.norms, analysis.upper)
    uses: Uses = {}
    if offers and limit is not None and select == "importance":
        first = _left_exact(plan, cands, offers, limit)
        choice = choose_with_sketches(cands, offers, first, limit, fairness)
        taken, uses = choice.taken, choice.uses
        report.sketches_offered = len(offers)
        report.best_share = best_share_with_sketches(cands, offers, limit)
    else:
        taken = choose(cands, limit, select, seed, fairness)
        report.best_share = best_share(cands, limit)
    chosen = _report(plan, cands, taken, weights_for, method.affine, roundoff_for, report, uses)
    report.best_share = bound_at_least(report.best_share, report.captured_share)
    return _restricted(plan, chosen, report, uses), report


def bound_at_least(best: float, captured: float) -> float:
    """The bound on the share any choice within the limit captures, given the share the plan
    captured (itself a choice within the limit). The bound holds in exact arithmetic; summed
    in another order it can fall a few ulps below, and only that is rounded up: a real gap is
    an error in the bound, raised, never hidden in the report."""
    if captured <= best:
        return best
    if captured - best <= 1e-12 * captured:
        return captured
    raise AssertionError(f"internal error: the budget's bound on the captured share, {best!r}, is below {captured!r}")


def _left_exact(
    plan: MergePlan, cands: list[Candidate], offers: Mapping[tuple[int, int], SketchOffer], limit: int
) -> set[int]:
    """The candidates read before the choice among resolutions: the chunks of the tensors a
    sketched expert's sketch left exact as too small to sketch (1-D norms and biases, ≤ 8 KiB),
    when the budget affords them all. They cost little (under 1% of a MiniLM or llama expert)
    and a sketch stands for the rest of the expert; ranked by ‖Δ‖² per byte against a DARE
    sketch's ‖Δ‖²·cos value they lost, and a merge without an expert's LayerNorm changes lost
    5 points on bench_quality."""
    sketched = {k for _, k in offers}
    small = {
        n
        for n, c in enumerate(cands)
        if c.norm is not None
        and c.expert in sketched
        and not sketchable(
            plan.tensors[c.tensor].base.shape, plan.tensors[c.tensor].base.dtype, plan.tensors[c.tensor].base.nbytes
        )
    }
    spare = limit - sum(c.cost for c in cands if c.norm is None)
    return small if sum(cands[n].cost for n in small) <= spare else set()


def _restricted(
    plan: MergePlan, chosen: dict[tuple[int, int], list[int]], report: BudgetReport, uses: Uses
) -> MergePlan:
    """A copy of ``plan`` reading only the ``chosen`` chunks (per tensor and expert), and the
    sketches of ``uses`` instead of their chunks."""
    tensors = []
    for t, tp in enumerate(plan.tensors):
        experts = range(len(tp.reads))
        tensors.append(tp.restricted([chosen.get((t, k), ()) for k in experts], [uses.get((t, k)) for k in experts]))
    return dataclasses.replace(plan, tensors=tensors, budget=report, fetch_sizes=dict(plan.fetch_sizes))


def _report(
    plan: MergePlan,
    cands: list[Candidate],
    taken: list[bool],
    weights_for: Callable[[TensorPlan], Weights],
    affine: bool,
    roundoff_for: Callable[[TensorPlan], float],
    report: BudgetReport,
    uses: Uses,
) -> dict[tuple[int, int], list[int]]:
    """Fill the report from the choice; returns the chosen chunks per (tensor, expert)."""
    chosen: dict[tuple[int, int], list[int]] = {}
    per_chunk: dict[tuple[int, int], list[tuple[Candidate, bool]]] = {}
    for c, take in zip(cands, taken, strict=True):
        tb = report.tensors.setdefault(plan.tensors[c.tensor].name, TensorBudget())
        value = 0.0 if c.norm is None else c.weight * c.norm
        tb.candidates += 1
        tb.full_bytes += c.cost
        tb.energy += value * value
        report.expert_energy[c.expert] += value * value
        if take:
            report.expert_captured[c.expert] += value * value
            chosen.setdefault((c.tensor, c.expert), []).append(c.chunk)
            tb.chosen += 1
            tb.planned_bytes += c.cost
            tb.captured += value * value
        elif (c.tensor, c.expert) not in uses:
            tb.bound += c.bound
        per_chunk.setdefault((c.tensor, c.chunk), []).append((c, take))
    for (t, i), members in per_chunk.items():
        if all(take for _, take in members):
            continue
        tp = plan.tensors[t]
        u = roundoff_for(tp)
        gamma = gamma_n(len(tp.experts) + 4, u)
        base_norm = tp.base.chunks[i].l2
        moved = sum(c.bound for c, _ in members)
        size = math.inf if base_norm is None else weights_for(tp).base * base_norm
        # two results (budgeted and full), each: the base rounds only in the final add and cast
        # (plus float32 accumulation for linear), the deltas through every step
        report.tensors[tp.name].rounding += 2 * (
            (2 * u + gamma_n(len(tp.experts) + 2, 2.0**-24)) * size + gamma * moved
        )
    for (t, k), use in uses.items():
        tp, weight = plan.tensors[t], abs(weights_for(plan.tensors[t]).experts[k])
        tb = report.tensors[tp.name]
        tb.captured += weight * weight * use.captured
        tb.planned_bytes += use.cost
        tb.bound += weight * use.sketch.residual(use.rank)
        # the reconstructed expert (base + Δ̂) is rounded to the base's dtype before the method sees it
        norms = [c.l2 for c in tp.base.chunks]
        base_norm = math.inf if None in norms else math.sqrt(sum(n * n for n in norms if n is not None))
        tb.rounding += weight * roundoff_for(tp) * (base_norm + use.sketch.norm_bound(use.rank))
        tb.sketch_ranks[k] = use.rank
        report.expert_captured[k] += weight * weight * use.captured
        report.sketches_used += 1
        report.sketch_bytes += use.cost
    report.candidates = len(cands)
    report.chosen = sum(taken)
    report.planned_bytes = sum(c.cost for c, take in zip(cands, taken, strict=True) if take) + report.sketch_bytes
    report.energy = sum(tb.energy for tb in report.tensors.values())
    report.captured = sum(tb.captured for tb in report.tensors.values())
    if affine:
        report.error_bound = sum(tb.bound for tb in report.tensors.values())
        report.rounding_allowance = sum(tb.rounding for tb in report.tensors.values())
    return chosen
