"""bench_merge's cases: one merge (method, K) run by mergekit and by mgit, what each read, and the
child that compares their outputs.

Why: the merge script and its report both name a case and its outcome by these records; the
comparison runs in a child that imports the mgit under test (``script_child``), so it lives in the
harness beside the records rather than in the script.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from harness import merges
from harness.merges import Merged, Setup
from harness.sameness import Sameness, compare_tensors, safetensors_dir

if TYPE_CHECKING:
    from mgit import Repository


@dataclass(frozen=True)
class Method:
    """How bench_merge says one method to both tools: its parameters (mergekit's names, which are
    also `mgit merge`'s), whether each expert gets weight 1/K, whether the base is named, the one
    expert count it takes (if it takes one), and whether it draws random numbers (then both tools are
    seeded: ``mergekit-yaml --random-seed``, ``mgit merge --seed``)."""

    expert_params: Mapping[str, float] = field(default_factory=dict)  # per expert (mergekit: models' parameters)
    params: Mapping[str, float] = field(default_factory=dict)  # the merge's own (mergekit: top-level parameters)
    weighted: bool = True  # each expert weight 1/K
    base: bool = True  # the base named (`base_model`, ``--base=main``); False: a merge of the experts alone
    k: int | None = None  # the one expert count the method takes; None: the run's K
    seeded: bool = False  # random: both tools given seed SEED
    caveat: str = ""  # what the report must say of its comparison with mergekit

    def ks(self, ks: Sequence[int]) -> tuple[int, ...]:
        """The expert counts this method runs at, of the run's ``ks``."""
        return tuple(ks) if self.k is None else (self.k,)

    def words(self) -> str:
        """Its parameters as the report's methods table says them."""
        said = ["weight 1/K" if self.weighted else "no weights"]
        said += [f"{name} {value:g}" for name, value in {**self.expert_params, **self.params}.items()]
        return ", ".join(said + (["seed 0"] if self.seeded else []))


FUSION_SAMPLES = (
    "arcee_fusion takes the quantiles of a tensor over 1,000,000 elements from 1,000,000 of its scores drawn at "
    "random, and mgit cannot replay mergekit's draws of them (`--rng mergekit` refuses it): each tool draws its own, "
    "so the outputs are equal only where both samples give the same thresholds (in bf16 they mostly do: the scores "
    "take few values)."
)

# Parameters are mergekit's defaults where they are given at all, except those that would leave the
# method's own step unexercised (sce's select_topk: 1 keeps everything) or that have none (nearswap's t,
# mergekit's reference value). multislerp runs without a base, as its spherical mean of the models
# themselves; nuslerp with one (the experts' offsets from it interpolated): what a fine-tune's user writes.
METHODS: dict[str, Method] = {
    "task_arithmetic": Method(),
    "ties": Method(expert_params={"density": 0.5}),
    "nearswap": Method(params={"t": 1e-4}, weighted=False, k=1),
    "nuslerp": Method(k=2),
    "multislerp": Method(base=False),
    "karcher": Method(weighted=False, base=False),
    "sce": Method(params={"select_topk": 0.5}, weighted=False),
    "arcee_fusion": Method(weighted=False, k=1, seeded=True, caveat=FUSION_SAMPLES),
    "ram": Method(params={"epsilon": 1e-5}, weighted=False),
    "ramplus_tl": Method(params={"r": 0.1, "alpha": 0.2, "epsilon": 1e-5}, weighted=False),
}
DEFAULT_METHODS = ("task_arithmetic", "ties")  # the full run's, unless --methods names others
SEED = 0  # of the seeded methods, both tools
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

    @property
    def spec(self) -> Method:
        return METHODS[self.method]

    def mgit_cmd(self, mgit: list[str]) -> list[str]:
        m = self.spec
        params = {**m.expert_params, **m.params}
        seed, base = (SEED if m.seeded else None), ("main" if m.base else None)
        return merges.mgit_merge_cmd(
            mgit, self.method, self.k, self.branch, params, seed=seed, weighted=m.weighted, base=base
        )

    def mergekit_config(self, s: Setup) -> str:
        m = self.spec
        params = {**({"weight": 1 / self.k} if m.weighted else {}), **m.expert_params}
        base = s.base if m.base else None
        return merges.mergekit_config(self.method, base, s.experts[: self.k], params, dict(m.params) or None)

    @property
    def mergekit_flags(self) -> tuple[str, ...]:
        return ("--random-seed", str(SEED)) if self.spec.seeded else ()

    def inputs(self, s: Setup) -> list[Path]:
        """The model directories mergekit reads: the base (where named) and the first K experts."""
        return [*([s.base] if self.spec.base else []), *s.experts[: self.k]]


def cases(methods: Sequence[str], ks: Sequence[int]) -> list[Case]:
    """Every (method, K) of a run, each method at the run's ``ks`` or at the one K it takes."""
    return [Case(m, k) for m in methods for k in METHODS[m].ks(ks)]


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
