"""bench_budget's merges: what one run is (K, tool, budget, how chunks are picked), its mgit command,
and measuring it.

Why: the budget script and its report both name runs by this record (the report finds mergekit's
run and the importance plan beside the uniform pick at each budget); the script keeps only which
runs happen, in what order, and what it compares.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from harness import merges
from harness.merges import Merged, Setup
from harness.models import SEED, safetensors_bytes

METHOD = "task_arithmetic"
LAMBDA = 1.0
SELECT_SEED = SEED  # --seed of every mgit merge: what `--budget-select uniform` draws from


@dataclass(frozen=True)
class Run:
    """One merge of experts 1..k: mergekit's, or mgit's exact (budget None) or under a budget (percent)."""

    k: int
    tool: str  # "mergekit" or "mgit"
    budget: int | None = None
    select: str | None = None  # "importance" or "uniform", with a budget

    @property
    def branch(self) -> str:
        kind = "exact" if self.budget is None else f"{self.select}-{self.budget}"
        return f"k{self.k}-{kind}"

    @property
    def label(self) -> str:
        if self.tool == "mergekit":
            return "mergekit (full read)"
        return "mgit exact" if self.budget is None else f"mgit, {self.select}"

    @property
    def budget_cell(self) -> str:
        return "—" if self.budget is None else f"{self.budget}%"

    def mgit_cmd(self, mgit: list[str]) -> list[str]:
        params = {"lambda": LAMBDA}
        budget = {"budget": self.budget, "select": self.select, "seed": SELECT_SEED}
        return merges.mgit_merge_cmd(mgit, METHOD, self.k, self.branch, params, **budget)


def measure(s: Setup, run: Run) -> tuple[Merged[Run], Path | None]:
    """One run, timed: what it read (mergekit: the files it loads; mgit: its merge record) and, for
    mergekit, its output directory."""
    if run.tool == "mergekit":
        config = merges.mergekit_config(METHOD, s.base, s.experts[: run.k], {"weight": 1 / run.k}, {"lambda": LAMBDA})
        best, times, out = merges.run_mergekit(s, f"mergekit-{run.k}", config)
        experts = safetensors_bytes(s.experts[: run.k])
        return Merged(run, best, times, experts + safetensors_bytes([s.base]), expert_read=experts), out
    best, times, record = merges.run_mgit(s, run.mgit_cmd(s.mgit), run.branch)
    b = record["bytes"]
    read = b["base_measured"] + b["experts_measured"]
    return Merged(run, best, times, read, record, expert_read=b["experts_measured"]), None
