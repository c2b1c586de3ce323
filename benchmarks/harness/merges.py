"""The merge benchmarks' shared setup: one mgit repository of a base and K experts, mergekit beside it.

Why: bench_merge and bench_budget time `mgit merge` against `mergekit-yaml` on the same kind of
inputs; both need mergekit in its own environment, the generated base and experts, the base on
`main` and expert N on branch `expert-N` of a fresh repository, and both tools warmed up, all
untimed and in that order.
"""

from __future__ import annotations

import argparse
import importlib.metadata
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
)
from harness.variants import ensure_experts


@dataclass
class Setup:
    runner: Runner
    mgit: list[str]
    mergekit: Path
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
) -> Setup:
    """mergekit (installed when missing), the mgit under test (``check_mgit`` may refuse it), the base
    and ``experts`` experts (cached), the repository holding them and both tools warmed up."""
    venv = (args.mergekit_venv or MERGEKIT_VENV).resolve()
    mergekit = ensure_mergekit(venv)
    mgit, where = mgit_command(workdir, args.mgit_rev)
    if check_mgit:
        check_mgit(mgit, where)
    versions = {
        "mgit": mgit_label(mgit, where),
        "mergekit": package_version(venv / "bin" / "python", "mergekit"),
        "torch (mergekit's venv / mgit's)": f"{package_version(venv / 'bin' / 'python', 'torch')} / "
        f"{importlib.metadata.version('torch')}",
    }
    base, plan, sums = ensure_model(workdir, size_gb)
    dirs = ensure_experts(workdir, base, plan, sums, experts)
    runner = Runner(offline_env(workdir), args.idle_wait, args.other_wait, sample=True)
    scratch = fresh_dir(workdir / "runs")
    print("committing the base and the experts to a fresh mgit repository ...", flush=True)
    s = Setup(runner, mgit, mergekit, scratch / "repo", base, dirs, scratch, args.reps, plan, sums, versions)
    commit_branches(runner, mgit, s.repo, [("main", base), *((f"expert-{i}", e) for i, e in enumerate(dirs, 1))])
    print("warming up both tools (untimed) ...", flush=True)
    runner.run([str(mergekit), "--help"], scratch)
    runner.run([*mgit, "--help"], scratch)
    return s
