"""bench_scale's merges: what one merge is (K, method, tool, budget, checked out or not), its mgit
command and mergekit config, and measuring it.

Why: the scale script and its report both name merges by this record (the report finds mergekit's
and the exact merge beside each run); the script keeps only which merges run, in what order.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import merges
from harness.merges import Merged, Setup
from harness.models import safetensors_bytes

METHODS: dict[str, dict[str, float]] = {"task_arithmetic": {}, "ties": {"density": 0.5}}
BUDGET_METHOD = "task_arithmetic"  # the budgeted merges' method (ties: exact only)
NC_REPO = "repo-nc"  # the copy of the repository the --no-checkout merges run in


@dataclass(frozen=True)
class MergeRun:
    """One merge of experts 1..k: mergekit's, or mgit's exact (budget None) or under a budget (percent)."""

    k: int
    method: str
    tool: str  # "mergekit" or "mgit"
    budget: int | None = None
    checkout: bool = True  # mgit: check the result out (without: -b NAME --no-checkout)

    @property
    def weight(self) -> float:
        return 1 / self.k

    @property
    def branch(self) -> str:
        kind = "exact" if self.budget is None else f"b{self.budget}"
        return f"k{self.k}-{self.method}-{kind}-{'co' if self.checkout else 'nc'}"

    @property
    def label(self) -> str:
        if self.tool == "mergekit":
            return "mergekit-yaml"
        budget = "" if self.budget is None else f" --budget {self.budget}%"
        return f"mgit merge{budget}" + ("" if self.checkout else " --no-checkout")

    def mgit_cmd(self, mgit: list[str]) -> list[str]:
        params = METHODS[self.method]
        return merges.mgit_merge_cmd(
            mgit, self.method, self.k, self.branch, params, budget=self.budget, checkout=self.checkout
        )

    def mergekit_config(self, base: Path, experts: Sequence[Path]) -> str:
        """base, experts 1..k with weight 1/k (ties: density 0.5), bf16."""
        params = {"weight": self.weight, **METHODS[self.method]}
        return merges.mergekit_config(self.method, base, experts[: self.k], params)


def repo_of(s: Setup, run: MergeRun) -> Path:
    """The repository a merge runs in: the --no-checkout merges in a copy made before the first merge, so
    that neither variant of a merge finds the other's result already stored (and skips writing it)."""
    return s.repo if run.checkout else s.scratch / NC_REPO


def measure(s: Setup, run: MergeRun) -> tuple[Merged[MergeRun], Path | None]:
    """One merge, timed: what it reads (mergekit: its input files; mgit: its record's measured chunk
    bytes, base + experts) and, for mergekit, its output directory."""
    if run.tool == "mergekit":
        name = f"mergekit-{run.method}-{run.k}"
        best, times, out = merges.run_mergekit(s, name, run.mergekit_config(s.base, s.experts))
        return Merged(run, best, times, safetensors_bytes([s.base, *s.experts[: run.k]])), out
    best, times, record = merges.run_mgit(s, run.mgit_cmd(s.mgit), run.branch, repo_of(s, run))
    b = record.get("bytes", {})
    return Merged(run, best, times, b.get("base_measured", 0) + b.get("experts_measured", 0), record), None
