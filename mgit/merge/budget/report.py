"""What a budgeted plan chose and what it keeps of the full merge: the report a plan carries
(``MergePlan.budget``), recorded in the merge commit (``mgit.plan/1``, key ``budget``) and shown
by ``--explain``. Plain data, below the plan and the budget code that fills it."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any


def _finite(x: float | None) -> float | None:
    """JSON has no infinity: a bound that does not exist (a base chunk with a NaN or inf) is null."""
    return x if x is not None and math.isfinite(x) else None


@dataclass
class TensorBudget:
    """One tensor's share of a budgeted plan (for --explain and the record)."""

    candidates: int = 0
    chosen: int = 0
    full_bytes: int = 0
    planned_bytes: int = 0
    energy: float = 0.0  # Σ (a_k ‖Δ‖)² over candidates
    captured: float = 0.0  # ... over chosen ones
    bound: float = 0.0  # Σ a_k ‖Δ‖ over skipped ones
    rounding: float = 0.0
    sketch_ranks: dict[int, int] = field(default_factory=dict)  # expert → rank of the sketch read instead


@dataclass
class BudgetReport:
    given: str | None
    limit: int | None  # bytes; None: no budget
    select: str
    full_bytes: int  # expert bytes a full merge reads
    planned_bytes: int = 0
    candidates: int = 0
    chosen: int = 0
    energy: float = 0.0
    captured: float = 0.0
    # no choice within the limit captures more (the fractional knapsack's optimum, or the LP
    # relaxation's over chunks and sketch prefixes); never below captured_share
    best_share: float = 1.0
    error_bound: float | None = None  # affine methods only
    rounding_allowance: float | None = None
    analyze_pairs: int = 0
    analyze_bytes: int = 0
    analyze: dict[str, Any] = field(default_factory=dict)  # mgit.merge.budget.analyze.Analysis.to_json()
    tensors: dict[str, TensorBudget] = field(default_factory=dict)
    fairness: str = "global"  # how the budget was shared among the experts (importance.FAIRNESS)
    expert_energy: list[float] = field(default_factory=list)  # per expert: Σ (a_k ‖Δ‖)² over its candidates
    expert_captured: list[float] = field(default_factory=list)  # ... over its chosen ones
    sketches_offered: int = 0  # expert tensors with a stored sketch the budget could read
    sketches_used: int = 0  # ... and those it did, instead of their chunks
    sketch_bytes: int = 0
    sketches_computed: int = 0  # experts sketched for this merge first (sketch_missing)

    @property
    def captured_share(self) -> float:
        return self.captured / self.energy if self.energy > 0 else 1.0

    @property
    def expert_shares(self) -> list[float]:
        """Each expert's captured share: a budget that leaves one near 0 leaves its task at the base."""
        return [c / e if e > 0 else 1.0 for c, e in zip(self.expert_captured, self.expert_energy, strict=True)]

    def to_json(self) -> dict[str, Any]:
        sketches = {}
        if self.sketches_offered:  # only where sketches were offered: older records stay as they were
            sketches = {
                "sketches": {
                    "offered": self.sketches_offered,
                    "used": self.sketches_used,
                    "bytes": self.sketch_bytes,
                    "delta": "reconstructed",
                    "computed": self.sketches_computed,
                }
            }
        return {
            "given": self.given,
            "limit_bytes": self.limit,
            "select": self.select,
            "expert_bytes_full": self.full_bytes,
            "expert_bytes_planned": self.planned_bytes,
            "chunks_candidate": self.candidates,
            "chunks_chosen": self.chosen,
            "fairness": self.fairness,
            "captured_share": self.captured_share,
            "captured_share_per_expert": self.expert_shares,
            "captured_share_max": self.best_share,
            "error_bound": _finite(self.error_bound),
            "rounding_allowance": _finite(self.rounding_allowance),
            "analyze": {"pairs": self.analyze_pairs, "bytes_read": self.analyze_bytes} | self.analyze,
        } | sketches
