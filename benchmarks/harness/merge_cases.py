"""bench_merge's cases: one merge (method, K) run by mergekit and by mgit, what each read, and the
child that compares their outputs.

Why: the merge script and its report both name a case and its outcome by these records; the
comparison runs in a child that imports the mgit under test (``script_child``), so it lives in the
harness beside the records rather than in the script.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness import merges
from harness.merges import Merged, Setup
from harness.sameness import Sameness, compare_tensors, safetensors_dir

if TYPE_CHECKING:
    from mgit import Repository

METHODS: dict[str, dict[str, float]] = {"task_arithmetic": {}, "ties": {"density": 0.5}}
COMPARE_CODE = "from harness.merge_cases import compare_main; compare_main()"  # the child, as script_child runs it


@dataclass(frozen=True)
class Case:
    method: str
    k: int

    @property
    def label(self) -> str:
        return f"{self.method}-{self.k}"

    @property
    def branch(self) -> str:
        return f"merge-{self.label}-1"

    def mgit_cmd(self, mgit: list[str]) -> list[str]:
        return merges.mgit_merge_cmd(mgit, self.method, self.k, self.branch, METHODS[self.method])

    def mergekit_config(self, s: Setup) -> str:
        params = {"weight": 1 / self.k, **METHODS[self.method]}
        return merges.mergekit_config(self.method, s.base, s.experts[: self.k], params)


def compare_main() -> None:
    """In a child (``python -c``): mgit's merged tensors at REV vs mergekit's output directory, and
    what the merge read of the experts; prints JSON."""
    from mgit import Repository

    repo_dir, rev, out_dir = sys.argv[1:4]
    with Repository(repo_dir) as repo:
        ours = repo.state_dict(rev)
        own, deltas = expert_chunks(repo, rev)
    doc = compare_tensors(ours, safetensors_dir(Path(out_dir)))
    print(json.dumps(doc | {"expert_own_bytes": own, "expert_delta_chunks": deltas}))


def expert_chunks(repo: Repository, rev: str) -> tuple[int, int]:
    """(stored bytes of the expert chunks the merge at ``rev`` read, without their delta bases; how many
    of them are stored as deltas): what the record's measured bytes would be if delta bases already in
    memory (the base's chunks) were not decoded again."""
    record = repo.merge_record(rev)
    assert record is not None, f"{rev} is not a merge"
    experts = [e["commit"] for e in record["experts"]]
    plan, _ = repo.merge_plan(experts, record["method"], record["base"], **record["parameters"])
    own = deltas = 0
    for tp in plan.tensors:
        for m, indexes in zip(tp.experts, tp.reads, strict=True):
            for i in indexes:
                loc = repo.store.locate(m.chunks[i].id)
                own += loc.length
                deltas += loc.base is not None
    return own, deltas


@dataclass
class Outcome:
    case: Case
    mergekit: Merged[Case]  # read: the safetensors files it must read, base + K experts
    mgit: Merged[Case]  # read: its merge record's measured bytes
    same: Sameness
    expert_own_bytes: int  # stored bytes of the expert chunks read, without their delta bases
    expert_delta_chunks: int  # of those chunks, how many are deltas (against the base's chunk)

    @property
    def speedup(self) -> float:
        return self.mergekit.proc.seconds / self.mgit.proc.seconds

    @property
    def rss_ratio(self) -> float:
        return self.mgit.proc.max_rss / self.mergekit.proc.max_rss

    @property
    def anon_ratio(self) -> float | None:
        mk, mg = (m.proc.peaks.get("RssAnon") for m in (self.mergekit, self.mgit))
        return mg / mk if mk and mg else None
