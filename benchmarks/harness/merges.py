"""The merge benchmarks' shared setup: one mgit repository of a base and K experts, mergekit beside it.

Why: bench_merge and bench_budget time `mgit merge` against `mergekit-yaml` on the same kind of
inputs; both need mergekit in its own environment, the generated base and experts, the base on
`main` and expert N on branch `expert-N` of a fresh repository, and both tools warmed up, all
untimed and in that order. Also the check that a merge's result equals another tool's, bit for bit.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.models import ModelPlan, ensure_model
from harness.runner import Runner, fresh_dir
from harness.tools import (
    MERGEKIT_VENV,
    commit_branches,
    ensure_mergekit,
    mgit_command,
    mgit_label,
    offline_env,
    package_version,
    script_child,
)
from harness.variants import ensure_experts


@dataclass
class Setup:
    runner: Runner
    mgit: list[str]
    mergekit: Path | None  # None: prepared without mergekit
    repo: Path
    base: Path
    experts: list[Path]
    scratch: Path
    reps: int
    plan: ModelPlan
    sums: dict[str, str]  # the base's files' sha256
    versions: dict[str, str] = field(default_factory=dict)  # for the report's Versions line


def prepare(
    args: argparse.Namespace,
    workdir: Path,
    size_gb: float,
    experts: int,
    check_mgit: Callable[[list[str], str], None] | None = None,
    *,
    plan: ModelPlan | None = None,
    with_mergekit: bool = True,
    cold: bool = False,
) -> Setup:
    """mergekit (installed when missing; left out without ``with_mergekit``), the mgit under test
    (``check_mgit`` may refuse it), the base (of ``size_gb``, or of ``plan``) and ``experts`` experts
    (cached), the repository holding them and both tools warmed up. With ``cold`` the runner drops the
    page cache before every timed run."""
    venv = (args.mergekit_venv or MERGEKIT_VENV).resolve()
    mergekit = ensure_mergekit(venv) if with_mergekit else None
    mgit, where = mgit_command(workdir, args.mgit_rev)
    if check_mgit:
        check_mgit(mgit, where)
    versions = {"mgit": mgit_label(mgit, where)}
    if mergekit is not None:
        versions["mergekit"] = package_version(venv / "bin" / "python", "mergekit")
        versions["torch (mergekit's venv / mgit's)"] = (
            f"{package_version(venv / 'bin' / 'python', 'torch')} / {importlib.metadata.version('torch')}"
        )
    base, plan, sums = ensure_model(workdir, size_gb, plan=plan)
    dirs = ensure_experts(workdir, base, plan, sums, experts)
    runner = Runner(offline_env(workdir), args.idle_wait, args.other_wait, sample=True, cold=cold)
    scratch = fresh_dir(workdir / "runs")
    print("committing the base and the experts to a fresh mgit repository ...", flush=True)
    s = Setup(runner, mgit, mergekit, scratch / "repo", base, dirs, scratch, args.reps, plan, sums, versions)
    commit_branches(runner, mgit, s.repo, [("main", base), *((f"expert-{i}", e) for i, e in enumerate(dirs, 1))])
    print("warming up the tools (untimed) ...", flush=True)
    if mergekit is not None:
        runner.run([str(mergekit), "--help"], scratch)
    runner.run([*mgit, "--help"], scratch)
    return s


# -- is a merge's result another tool's, bit for bit ------------------------------------------


@dataclass
class Sameness:
    tensors: int  # in mgit's result
    identical: int  # of those, equal bit for bit to the other tool's
    max_abs: float  # largest absolute difference, in float32
    problems: list[str]  # tensors missing on one side, or of another dtype or shape

    @property
    def bit_identical(self) -> bool:
        return not self.problems and self.identical == self.tensors


def compare_tensors(ours: dict, out_dir: Path) -> dict:
    """In a child: mgit's tensors (``Repository.state_dict``) against the safetensors files of another
    tool's output directory, as Sameness's fields."""
    import torch
    from safetensors import safe_open

    seen, identical, max_abs, problems = set(), 0, 0.0, []
    for path in sorted(out_dir.glob("*.safetensors")):
        with safe_open(str(path), framework="pt") as f:
            for name in f.keys():
                theirs, mine = f.get_tensor(name), ours.get(name)
                seen.add(name)
                if mine is None or mine.dtype != theirs.dtype or mine.shape != theirs.shape:
                    problems.append(name)
                    continue
                identical += bool(torch.equal(mine.reshape(-1).view(torch.uint8), theirs.reshape(-1).view(torch.uint8)))
                max_abs = max(max_abs, float((mine.float() - theirs.float()).abs().max()))
    problems += sorted(set(ours) - seen)
    return {"tensors": len(ours), "identical": identical, "max_abs": max_abs, "problems": problems}


def same_main() -> None:
    """In a child (``python -c``): mgit's tensors at REV vs a safetensors directory's; prints JSON."""
    from mgit import Repository

    repo_dir, rev, out_dir = sys.argv[1:4]
    with Repository(repo_dir) as repo:
        ours = repo.state_dict(rev)
    print(json.dumps(compare_tensors(ours, Path(out_dir))))


def same_as(runner: Runner, mgit: list[str], repo: Path, rev: str, out: Path) -> Sameness:
    """Whether the merge at ``rev`` equals the tensors of the safetensors files in ``out``, bit for bit."""
    code = "from harness.merges import same_main; same_main()"
    proc = runner.run(script_child(mgit, code, str(repo), rev, str(out)), repo)
    return Sameness(**json.loads(proc.output.strip().splitlines()[-1]))
