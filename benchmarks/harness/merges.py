"""The merge benchmarks' shared runs: one mgit repository of a base and K experts, mergekit beside it.

Why: bench_merge, bench_budget and bench_scale time `mgit merge` against `mergekit-yaml` on the
same kind of inputs; each needs mergekit in its own environment, the generated base and experts,
the base on `main` and expert N on branch `expert-N` of a fresh repository, both tools warmed up
(all untimed, in that order), then the same commands: mergekit's YAML and `mgit merge` with the same
parameters, each timed the same way, and mgit's merge record read back. The scripts keep only which
merges they run and what they report; whether two results are the same is harness/sameness.py.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import shlex
import shutil
import subprocess
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from harness.machine import IDLE_BELOW
from harness.models import GB, SEED, ModelPlan, ensure_model
from harness.report import relative
from harness.runner import Proc, Runner, best_of, fresh_dir
from harness.sameness import Sameness
from harness.tools import (
    MERGEKIT_VENV,
    commit_branches,
    ensure_mergekit,
    json_output,
    mergekit_cmd,
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


# -- the same merge, by each tool ---------------------------------------------------------------


def mergekit_config(
    method: str,
    base: Path | None,
    experts: Sequence[Path],
    params: Mapping[str, float],
    merge_params: Mapping[str, float] | None = None,
) -> str:
    """mergekit's YAML (JSON is YAML): the base (none for a merge without one), the experts each with
    ``params`` (where any), the merge's own ``merge_params`` (e.g. task_arithmetic's lambda) where
    given, bf16."""
    doc: dict[str, Any] = {"merge_method": method}
    if base is not None:
        doc["base_model"] = str(base)
    doc["models"] = [{"model": str(e), **({"parameters": dict(params)} if params else {})} for e in experts]
    if merge_params is not None:
        doc["parameters"] = dict(merge_params)
    doc["dtype"] = "bfloat16"
    return json.dumps(doc, indent=2) + "\n"


OWN_FLAGS = frozenset({"density", "lambda", "epsilon", "gamma", "t"})  # `mgit merge --NAME`; others --param


def mgit_param_flag(name: str, value: float) -> str:
    """One mergekit parameter as an `mgit merge` flag: its own option where it has one, else ``--param``."""
    return f"--{name}={value!r}" if name in OWN_FLAGS else f"--param={name}={value!r}"


def mgit_merge_cmd(
    mgit: list[str],
    method: str,
    k: int,
    branch: str,
    params: Mapping[str, float],
    *,
    budget: int | None = None,
    select: str | None = None,
    seed: int | None = None,
    checkout: bool = True,
    weighted: bool = True,
    base: str | None = "main",
) -> list[str]:
    """`mgit merge` of experts 1..k (branches `expert-N`) into ``base`` (none: a merge without one),
    weights 1/k unless not ``weighted``, ``params`` as flags, bf16, on a new branch; under ``budget``
    percent (picked by ``select``) and ``--seed`` when given, with ``--no-checkout`` unless
    ``checkout``: what mergekit_config says to mergekit."""
    weights = [*([f"--weights={1 / k!r}"] if weighted else []), *(mgit_param_flag(n, v) for n, v in params.items())]
    budgeted = [] if budget is None else [f"--budget={budget}%", *([f"--budget-select={select}"] if select else [])]
    seeded = [] if seed is None else [f"--seed={seed}"]
    no_checkout = [] if checkout else ["--no-checkout"]
    experts = [f"expert-{i}" for i in range(1, k + 1)]
    return [
        *[*mgit, "-q", "merge", f"--method={method}", *weights, "--dtype=BF16", *budgeted, *seeded],
        *([f"--base={base}"] if base else []),
        *["-b", branch, *no_checkout, "-m", f"bench {branch}", *experts],
    ]


def merge_takes(mgit: list[str], flag: str) -> bool:
    """Whether the mgit under test's `merge` takes ``flag`` (an older revision may not)."""
    res = subprocess.run([*mgit, "merge", "--help"], capture_output=True, text=True)
    return flag in res.stdout


def run_mergekit(
    s: Setup, name: str, config: str, config_name: str | None = None, flags: Sequence[str] = ()
) -> tuple[Proc, list[float], Path]:
    """`mergekit-yaml` with ``config`` (written to ``config_name``, default NAME.yml) and ``flags`` (e.g.
    its seed) into the output directory NAME of the scratch directory, ``s.reps`` times (the output
    deleted before each): (the fastest run, every run's seconds, the output directory)."""
    assert s.mergekit is not None, "prepared without mergekit"
    path = s.scratch / (config_name or f"{name}.yml")
    path.write_text(config)
    out = s.scratch / name
    cmd = mergekit_cmd(s.mergekit, path, out, flags)
    best, times = best_of(
        s.reps, lambda: shutil.rmtree(out, ignore_errors=True), lambda: s.runner.run(cmd, s.scratch, timed=True)
    )
    return best, times, out


def run_mgit(s: Setup, cmd: list[str], branch: str, repo: Path | None = None) -> tuple[Proc, list[float], dict]:
    """The `mgit merge` ``cmd`` (which makes ``branch``) in ``repo`` (default the setup's), ``s.reps``
    times, each from a checkout of `main` and without the previous run's branch: (the fastest run,
    every run's seconds, its merge record)."""
    repo = repo or s.repo
    made = False

    def prepare() -> None:
        nonlocal made
        s.runner.run([*s.mgit, "-q", "checkout", "main"], repo)  # every merge starts from the base's tree
        if made:  # the previous repetition's branch
            s.runner.run([*s.mgit, "-q", "branch", "-D", branch], repo)
        made = True

    best, times = best_of(s.reps, prepare, lambda: s.runner.run(cmd, repo, timed=True))
    return best, times, merge_record(s, branch, repo)


def merge_record(s: Setup, rev: str, repo: Path | None = None) -> dict:
    """The merge record of ``rev`` (`plan` of `mgit show --json`; empty for a revision without one)."""
    return json_output(s.runner.run([*s.mgit, "show", "--json", rev], repo or s.repo).output).get("plan", {})


def example_cmds(
    s: Setup, mergekit: tuple[str, str] | None, mgit: list[str], mergekit_flags: Sequence[str] = ()
) -> list[str]:
    """The commands a report shows, paths relative to the repository root: mergekit's with the config
    and output names of ``mergekit`` (when it ran) and its ``mergekit_flags``, and the mgit command ``mgit``."""
    shown = []
    if mergekit is not None and s.mergekit is not None:
        config, out = s.scratch / mergekit[0], s.scratch / mergekit[1]
        shown.append(shlex.join(mergekit_cmd(s.mergekit, config, out, mergekit_flags)))
    return [relative(c) for c in [*shown, shlex.join(mgit)]]


R = TypeVar("R")


@dataclass
class Merged(Generic[R]):
    """One merge ``run`` (the script's description of it, compared with ==), timed."""

    run: R
    proc: Proc  # the fastest run
    times: list[float]  # every run's seconds
    read: int  # bytes it reads: mergekit the input files, mgit its record's measured chunk bytes (base + experts)
    record: dict[str, Any] = field(default_factory=dict)  # mgit's merge record (`plan` of `mgit show --json`)
    same: Sameness | None = None  # against a reference (mergekit's output, or the exact merge)
    expert_read: int = 0  # of ``read``, the experts' bytes

    @property
    def rel_error(self) -> float | None:
        return None if self.same is None else self.same.rel_error


def find(results: Sequence[Merged[R]], run: R) -> Merged[R] | None:
    """The result of ``run``, if it ran."""
    return next((m for m in results if m.run == run), None)


# -- the words every merge report shares --------------------------------------------------------


def base_words(plan: ModelPlan, raw: int) -> str:
    """The generated base model, as a report's Input line names it (up to its files)."""
    s = plan.shape
    return (
        f"a generated llama-like bf16 base model of {raw / GB:.3f} GB ({plan.layers} layers, hidden "
        f"{s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, {len(plan.tensors)} tensors, weights "
        f"N(0, 0.02) from seed {SEED}, norms ones; "
    )


def waits_words(what: str) -> str:
    """How every timed run was started, as a report's "How it was measured" opens."""
    return (
        f"How it was measured: every {what} is a separate process timed by wall clock, after untimed waits until "
        f"no other benchmark of this repository runs and under {IDLE_BELOW:.0%} of the CPUs are busy, and an "
        "untimed `sync`"
    )
