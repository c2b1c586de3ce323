"""Scale benchmark: merges and storage of a TinyLlama-1.1B-sized model, against mergekit, git-lfs, DVC and cp.

Why: mgit claims that a merge costs what its plan reads and writes, not K + 1 whole models, and
that storing and materialising a model keeps pace with the tools people use, at the size users
merge (a 2.2 GB bf16 base, 8 or 16 experts, more than the page cache holds). bench_merge and
bench_budget measure the same claims on small models, where every file sits in the page cache;
here the cache is dropped before every timed step (when this process may: root), so reads come
from the disk, and each step's bytes read from and written to the disk are counted. One run:

1. generate a TinyLlama-1.1B-shaped bf16 base (hidden 2048, 22 layers, intermediate 5632, vocab
   32000, ~2.2 GB; `--quick`: 3 layers, ~0.5 GB), K experts as bench_merge makes them (a third of
   the tensors frozen, per-tensor noise scales log-uniform over 1e-4 … 1e-1 of the tensor's std)
   and a dense fine-tune (every tensor + N(0, (2% σ)²)), all cached;
2. storage: per tool, in a fresh directory holding a copy of the base, time storing the base,
   then the dense fine-tune over it, then materialising it again into the working tree (mgit add
   + commit and checkout; git + git-lfs add + commit and checkout; dvc add and checkout), beside
   `cp -r` of the same files; check every file byte for byte;
3. merges: the base on `main` and expert N on branch `expert-N` of one mgit repository (untimed);
   for each K: `mergekit-yaml --no-cuda` against `mgit merge` exact (task_arithmetic and ties)
   and `mgit merge --budget B%` (task_arithmetic), each mgit merge with and without
   `--no-checkout` (skipped, saying why, when the mgit under test lacks the flag); the exact
   merges are compared with mergekit's output bit for bit;
4. per timed step: wall time, peak RSS, bytes read from and written to the disk
   (`/proc/<pid>/io` read_bytes / write_bytes of the process and its children), ratios to
   mergekit, git-lfs and `cp -r`;
5. print Markdown tables, draw wall time against the budget for both tools (SVG; mergekit a
   horizontal line) and, with ``--write-docs``, replace this benchmark's sections of
   benchmarks/results/bench_scale.md (one per part: a run of one part keeps the other's) and write
   benchmarks/results/bench_scale.svg.

The run checks the free disk first (the full size needs tens of GB: it prints what) and stops,
before writing anything, when it is short. Targets (what mgit must reach at this size against the
peers) are reported, never asserted.
GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import os
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness import cli, merges, sameness, scale_disk
from harness.machine import IDLE_BELOW, can_drop_caches, lock_workdir
from harness.merges import Merged, Setup, find
from harness.models import (
    GB,
    MB,
    NAMED_SHAPES,
    SEED,
    SHARDS,
    ModelPlan,
    ensure_model,
    plan_layers,
    safetensors_bytes,
)
from harness.plot import DASHED, PALETTE, SOLID, HLine, Series, line_chart, save
from harness.report import (
    REPO_ROOT,
    RESULTS_DIR,
    fmt_gb,
    fmt_rss,
    header_lines,
    ratio,
    relative,
    table,
    took,
    update_results,
)
from harness.runner import (
    MODEL_DIR,
    Proc,
    Result,
    Runner,
    copy_repository,
    disk_usage,
    fresh_copy,
    place_model,
    sha256_files,
    time_cp,
)
from harness.sameness import same_cell
from harness.targets import Target, at_least, at_most, target, targets_table
from harness.tools import Tools, find_tools, tool_env
from harness.variants import DENSE_NOISE, EXPERT_SEED, SCALE_DECADES, Version, ensure_variant

if TYPE_CHECKING:
    from matplotlib.figure import Figure

# One docs section per part, so that a run of one part (--parts store) replaces its own tables and keeps
# the other part's, measured in an earlier run. A merge run of some of the methods has a section (and a
# plot) of its own, placed after the full run's, which it leaves as it is.
MERGE_TITLE = "## Merges at scale (bench_scale.py)"
STORE_TITLE = "## Storage at scale (bench_scale.py)"
DOCS_IMAGE = RESULTS_DIR / "bench_scale.svg"
SHAPE, LAYERS, QUICK_LAYERS = "tinyllama", 22, 3
KS, QUICK_KS = (8, 16), (4,)
BUDGETS = (25, 10, 5)  # percent of the expert bytes the exact merge reads
METHODS: dict[str, dict[str, float]] = {"task_arithmetic": {}, "ties": {"density": 0.5}}
BUDGET_METHOD = "task_arithmetic"  # the budgeted merges' method (ties: exact only)
PARTS = ("store", "merge")
NC_REPO = "repo-nc"  # the copy of the repository the --no-checkout merges run in


# -- arguments ------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__)
    cli.add_common(
        p,
        workdir="bench-work/scale",
        quick=f"{QUICK_LAYERS} layers (~0.5 GB) and K = {', '.join(map(str, QUICK_KS))}: a smoke test",
        reps=(1, "runs of every timed step; the fastest is reported"),
        other_wait=3600,
        keep="keep the repositories and run directories afterwards",
        write_docs="replace the sections of the parts run in benchmarks/results/bench_scale.md (one per part; a "
        f"merge run of some --methods has its own) and write {DOCS_IMAGE.relative_to(REPO_ROOT)} (or that run's "
        "own plot)",
    )
    p.add_argument("--shape", choices=sorted(NAMED_SHAPES), default=SHAPE, help=f"architecture; default {SHAPE}")
    p.add_argument("--layers", type=int, help=f"layers of the model; default {LAYERS} ({QUICK_LAYERS} with --quick)")
    p.add_argument("--ks", type=cli.int_list, help="expert counts, e.g. 8,16 (default; 2,4 with --quick)")
    p.add_argument(
        "--budgets",
        type=cli.int_list,
        default=BUDGETS,
        help="budgets in percent, e.g. 25%%,10%%,5%% (default; '' for none)",
    )
    parts, methods = cli.names_list(PARTS, "part"), cli.names_list(tuple(METHODS), "method")
    p.add_argument("--parts", type=parts, default=PARTS, help="what to run, of: store, merge (default both)")
    p.add_argument(
        "--methods",
        type=methods,
        default=tuple(METHODS),
        help="merge methods, of: " + ", ".join(METHODS) + f" (default both; budgets apply to {BUDGET_METHOD})",
    )
    p.add_argument("--no-mergekit", action="store_true", help="skip mergekit (and its installation)")
    p.add_argument("--no-dvc", action="store_true", help="skip the DVC baseline (and its installation)")
    p.add_argument("--warm", action="store_true", help="leave the page cache as it is (default: drop it, when root)")
    cli.add_mergekit_venv(p)
    args = p.parse_args(argv)
    args.layers = args.layers or (QUICK_LAYERS if args.quick else LAYERS)
    args.ks = tuple(sorted(set(args.ks or (QUICK_KS if args.quick else KS))))
    args.budgets = tuple(sorted(set(args.budgets), reverse=True))
    if args.layers < 1 or not args.ks or min(args.ks) < 1:
        p.error("--layers and every K must be at least 1")
    if any(not 0 < b < 100 for b in args.budgets):
        p.error("budgets are percentages between 0 and 100 (the exact merge is always run)")
    return args


def merge_outputs(ks: Sequence[int], budgets: Sequence[int], methods: Sequence[str] = tuple(METHODS)) -> int:
    """Distinct merge results the run stores: per K, each method exact and each budget (a merge
    with and without --no-checkout writes the same chunks)."""
    return len(ks) * (len(methods) + (len(budgets) if BUDGET_METHOD in methods else 0))


@dataclass
class Part:
    """What one part of a run needs for its docs section: its versions, wall time and what it skipped."""

    versions: dict[str, str] = field(default_factory=dict)
    wall: float = 0.0
    waited: float = 0.0
    skipped: list[str] = field(default_factory=list)


# -- storage: add + commit and checkout -----------------------------------------------------


@dataclass(frozen=True)
class Contender:
    """One tool storing the base, then the dense fine-tune over it, then materialising it again."""

    name: str
    setup: list[list[str]]  # untimed, in a fresh directory holding the base
    store: list[list[str]]  # timed together, once per version
    store_label: str
    store_dir: str  # what holds the stored versions, measured like `du -s`
    checkout: list[str]  # timed: bring back the deleted model directory (the dense fine-tune)
    checkout_label: str


STORE_STEPS = ("base", "dense fine-tune")


def contenders(tools: Tools) -> list[Contender]:
    mgit = [*tools.mgit, "-q"]
    out = [
        Contender(
            "mgit",
            [[*mgit, "init"]],
            [[*mgit, "add", MODEL_DIR], [*mgit, "commit", "-m", "v"]],
            "add + commit",
            ".mgit",
            [*mgit, "checkout", "--force", "main"],
            "checkout --force main",
        ),
    ]
    if tools.git_lfs:
        out.append(
            Contender(
                "git + git-lfs",
                [["git", "init", "-q"], ["git", "lfs", "install", "--local"], ["git", "lfs", "track", "*.safetensors"]],
                [["git", "add", "-A"], ["git", "commit", "-q", "-m", "v"]],
                "add + commit",
                ".git",
                ["git", "checkout", "--", MODEL_DIR],
                "checkout -- model",
            )
        )
    if tools.dvc:
        out.append(
            Contender(
                "dvc",
                [[tools.dvc, "init", "--no-scm", "-q"]],
                [[tools.dvc, "add", "-q", MODEL_DIR]],
                "add",
                ".dvc/cache",
                [tools.dvc, "checkout", "-q"],
                "checkout",
            )
        )
    return out


def bench_store(c: Contender, base: Version, dense: Version, run_dir: Path, runner: Runner, reps: int) -> list[Result]:
    """Per repetition, in a fresh directory: store the base, then the dense fine-tune, then check it out.
    Each step's fastest run is reported; the checkout must reproduce the fine-tune byte for byte."""
    runs: list[list[Proc]] = [[], [], []]
    stored: list[int] = [0, 0]
    identical = True
    for _ in range(reps):
        fresh_copy(base.model, run_dir)
        for cmd in c.setup:
            runner.run(cmd, run_dir)
        for i, version in enumerate((base, dense)):
            if i:
                place_model(version.model, run_dir)  # as a training run would overwrite it (untimed)
            runs[i].append(runner.steps(c.store, run_dir))
            stored[i] = disk_usage(run_dir / c.store_dir)
        shutil.rmtree(run_dir / MODEL_DIR)
        runs[2].append(runner.run(c.checkout, run_dir, timed=True))
        identical &= sha256_files(run_dir / MODEL_DIR) == dense.sums
    shutil.rmtree(run_dir, ignore_errors=True)
    out = []
    for i, what in enumerate(STORE_STEPS):
        best = min(runs[i], key=lambda p: p.seconds)
        out.append(Result(c.name, f"{c.store_label}: {what}", best, [p.seconds for p in runs[i]], stored[i]))
    best = min(runs[2], key=lambda p: p.seconds)
    out.append(Result(c.name, c.checkout_label, best, [p.seconds for p in runs[2]], identical=identical))
    return out


def run_store_part(args: Any, workdir: Path, plan: ModelPlan, cold: bool, part: Part) -> tuple[list[Result], int]:
    """Every tool stores the base, then the dense fine-tune, then checks it out; `cp -r` beside them:
    (the steps, the base's raw size). ``part`` gets the versions, times and what was skipped."""
    started = time.perf_counter()
    tools = find_tools(workdir, args.mgit_rev, not args.no_dvc)
    base_dir, _, sums = ensure_model(workdir, None, plan=plan)
    base = Version("base", "", "the generated base model", base_dir, sums)
    dense = ensure_variant(workdir, base_dir, sums, "dense")
    runner = Runner(tool_env(workdir), args.idle_wait, args.other_wait, sample=True, cold=cold)
    runs = workdir / "store-runs"
    results: list[Result] = []
    for c in contenders(tools):
        print(f"storage: {c.name} ...", flush=True)
        results += bench_store(c, base, dense, runs / c.name.replace(" ", ""), runner, args.reps)
        print("  " + ", ".join(f"{r.step} {r.best.seconds:.1f} s" for r in results[-3:]), flush=True)
    print("storage: cp -r ...", flush=True)
    results.append(time_cp(dense.model, runs / "cp", runner, dense.sums, args.reps))
    shutil.rmtree(runs, ignore_errors=True)
    part.versions, part.waited = tools.versions, runner.waited
    part.wall = time.perf_counter() - started - part.waited
    missing = (("git-lfs", tools.git_lfs), ("dvc", tools.dvc))
    part.skipped += [f"{n} (not installed)" for n, ok in missing if not ok and not (n == "dvc" and args.no_dvc)]
    if args.no_dvc:
        part.skipped.append("dvc (--no-dvc)")
    return results, base.raw


# -- merges ---------------------------------------------------------------------------------


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


def merge_runs(
    k: int, budgets: Sequence[int], mergekit: bool, no_checkout: bool, methods: Sequence[str] = tuple(METHODS)
) -> list[MergeRun]:
    """Per method: mergekit, mgit exact, then (task_arithmetic) every budget, largest first; each mgit
    merge checked out and, when the flag exists, with --no-checkout."""
    modes = (True, False) if no_checkout else (True,)
    runs = []
    for method in (m for m in METHODS if m in methods):
        if mergekit:
            runs.append(MergeRun(k, method, "mergekit"))
        runs += [MergeRun(k, method, "mgit", None, co) for co in modes]
        if method == BUDGET_METHOD:
            runs += [MergeRun(k, method, "mgit", b, co) for b in budgets for co in modes]
    return runs


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


def bench_merges(
    s: Setup, k: int, budgets: Sequence[int], no_checkout: bool, methods: Sequence[str]
) -> list[Merged[MergeRun]]:
    found: list[Merged[MergeRun]] = []
    outs: dict[str, Path] = {}
    for run in merge_runs(k, budgets, s.mergekit is not None, no_checkout, methods):
        print(f"K = {k}, {run.method}: {run.label} ...", flush=True)
        m, out = measure(s, run)
        if out is not None:
            outs[run.method] = out
        elif run.budget is None and run.checkout and run.method in outs:
            m.same = sameness.same_as(s.runner, s.mgit, s.repo, run.branch, outs[run.method])
        p, same = m.proc, f"; {same_cell(m.same)}" if m.same else ""
        disk = f"disk read {fmt_gb(p.disk_read, '?')} GB, written {fmt_gb(p.disk_written, '?')} GB"
        print(f"  {p.seconds:.1f} s, {fmt_rss(p)} MB, {disk}{same}", flush=True)
        found.append(m)
    for out in outs.values():
        shutil.rmtree(out, ignore_errors=True)
    return found


def run_merge_part(
    args: Any, workdir: Path, plan: ModelPlan, cold: bool, part: Part
) -> tuple[list[Merged[MergeRun]], list[str]]:
    """The base and the experts in one repository, then every merge at every K, mergekit beside mgit:
    (the merges, the example commands). ``part`` gets the versions, times and what was skipped."""
    started = time.perf_counter()
    ks, budgets = args.ks, args.budgets
    no_checkout = False

    def check_mgit(mgit: list[str], where: str) -> None:
        nonlocal no_checkout
        no_checkout = merges.merge_takes(mgit, "--no-checkout")
        if not no_checkout:
            why = f"the mgit under test ({where}) has no `merge --no-checkout`"
            print(f"skipping the --no-checkout merges: {why}", flush=True)
            part.skipped.append(f"the `--no-checkout` merges ({why})")

    with_mergekit = not args.no_mergekit
    s = merges.prepare(args, workdir, None, max(ks), check_mgit, plan=plan, with_mergekit=with_mergekit, cold=cold)
    part.versions = s.versions
    if no_checkout:
        print("copying the repository for the --no-checkout merges (untimed; its packs hard-linked) ...", flush=True)
        copy_repository(s.repo, s.scratch / NC_REPO)
    if args.no_mergekit:
        part.skipped.append("mergekit (--no-mergekit)")
    merged = [m for k in ks for m in bench_merges(s, k, budgets, no_checkout, args.methods)]
    part.waited = s.runner.waited
    kmax = max(ks)
    shown = BUDGET_METHOD if BUDGET_METHOD in args.methods else args.methods[0]  # the example's method
    budget = 10 if 10 in budgets and shown == BUDGET_METHOD else None
    run = MergeRun(kmax, shown, "mgit", budget, not no_checkout)
    mergekit = (f"mergekit-{shown}-{kmax}.yml", f"mergekit-{shown}-{kmax}")
    example = merges.example_cmds(s, mergekit, run.mgit_cmd([*s.mgit, "-C", str(repo_of(s, run))]))
    if not args.keep:
        shutil.rmtree(s.scratch, ignore_errors=True)
    part.wall = time.perf_counter() - started - part.waited
    return merged, example


# -- reporting ------------------------------------------------------------------------------


def chunks_cell(record: dict[str, Any]) -> str:
    """An mgit merge's output chunks computed and carried over from the base (its record), if it counts them."""
    b = record.get("bytes", {})
    if "output_chunks_computed" not in b:
        return ""
    return f"{b['output_chunks_computed']} / {b.get('output_chunks_carried', 0)}"


def merges_table(results: Sequence[Merged[MergeRun]]) -> str:
    header = [
        "K",
        "method",
        "run",
        "wall time (s)",
        "× faster than mergekit",
        "time / mgit exact",
        "peak RSS (MB)",
        "read from disk (GB)",
        "written to disk (GB)",
        "disk read / mergekit's",
        "bytes the tool reads (GB)",
        "output chunks computed / carried",
        "equal to mergekit",
        "other load",
    ]
    rows = []
    for m in results:
        r = m.run
        mk = find(results, MergeRun(r.k, r.method, "mergekit"))
        exact = find(results, MergeRun(r.k, r.method, "mgit", None, r.checkout))
        rows.append(
            [
                r.k,
                r.method,
                r.label,
                " / ".join(f"{t:.1f}" for t in m.times),
                ratio(mk.proc.seconds, m.proc.seconds) if mk and m is not mk else "",
                ratio(m.proc.seconds, exact.proc.seconds) if exact and r.budget is not None else "",
                fmt_rss(m.proc),
                fmt_gb(m.proc.disk_read, "?"),
                fmt_gb(m.proc.disk_written, "?"),
                ratio(m.proc.disk_read, mk.proc.disk_read, 3) if mk and m is not mk else "",
                fmt_gb(m.read, "?"),
                chunks_cell(m.record),
                same_cell(m.same),
                f"{m.proc.load_share:.0%}",
            ]
        )
    return table(header, "rllrrrrrrrrrlr", rows)


def step_kind(r: Result) -> str:
    """What a storage step did, whatever the tool calls it: "base", "dense fine-tune" or "checkout"."""
    return r.step.rsplit(": ", 1)[-1] if r.store_bytes is not None else "checkout"


def store_table(results: Sequence[Result], raw: int) -> str:
    header = [
        "tool",
        "step",
        "wall time (s)",
        "MB/s",
        "× faster than git-lfs",
        "time / cp -r",
        "peak RSS (MB)",
        "read from disk (GB)",
        "written to disk (GB)",
        "store (GB)",
        "byte-identical",
        "other load",
        "all runs (s)",
    ]
    rows = []
    lfs = {step_kind(r): r for r in results if r.tool == "git + git-lfs"}
    cp = next((r for r in results if r.tool == "cp -r"), None)
    for r in results:
        p = r.best
        same_step = lfs.get(step_kind(r))
        rows.append(
            [
                r.tool,
                r.step,
                f"{p.seconds:.2f}",
                f"{raw / MB / p.seconds:.0f}" if p.seconds > 0 else "",
                ratio(same_step.best.seconds, p.seconds)
                if same_step and r.tool not in ("git + git-lfs", "cp -r")
                else "",
                ratio(p.seconds, cp.best.seconds) if cp and r.store_bytes is None and r is not cp else "",
                fmt_rss(p),
                fmt_gb(p.disk_read, "?"),
                fmt_gb(p.disk_written, "?"),
                "" if r.store_bytes is None else f"{r.store_bytes / GB:.3f}",
                "" if r.identical is None else ("yes" if r.identical else "**NO**"),
                f"{p.load_share:.0%}",
                " / ".join(f"{t:.2f}" for t in r.times),
            ]
        )
    return table(header, "llrrrrrrrrlrl", rows)


def merge_title(methods: Sequence[str]) -> str:
    """The merge section's title: the full run's, or one of its own for a run of some methods only."""
    if set(methods) == set(METHODS):
        return MERGE_TITLE
    return f"## Merges at scale, {' and '.join(methods)} only (bench_scale.py)"


def docs_image(methods: Sequence[str]) -> Path:
    """Where the plot goes, beside the results: one per merge section (a run of some methods keeps the full run's)."""
    if set(methods) == set(METHODS):
        return DOCS_IMAGE
    return DOCS_IMAGE.with_name(f"{DOCS_IMAGE.stem}-{'-'.join(methods)}{DOCS_IMAGE.suffix}")


def read_targets(merged: Sequence[Merged[MergeRun]], kmax: int) -> list[Target]:
    """Each budgeted merge's reads at the largest K against what it may read (from its merge record):
    the experts' chunk bytes against the budget, the base's against the base chunks its plan computes
    from (what the method needs; a budget allows 1.5 x its share of the base on top)."""
    found = []
    planned: dict[int, Merged[MergeRun]] = {}  # budget → one of its merges (with or without checkout: one plan)
    for m in merged:
        if m.run.k == kmax and m.run.tool == "mgit" and m.run.method == BUDGET_METHOD and m.run.budget:
            planned.setdefault(m.run.budget, m)
    for budget, m in sorted(planned.items(), reverse=True):
        sizes, limit = m.record.get("bytes", {}), (m.record.get("budget") or {}).get("limit_bytes")
        read, needed = sizes.get("experts_measured"), sizes.get("base_estimated")
        v = read / limit if read is not None and limit else None
        metric = f"K = {kmax}, --budget {budget}%: expert bytes read / the budget"
        found.append(target(metric, v, "≤ 1", at_most(1), "{:.3f}"))
        read = sizes.get("base_measured")
        v = read / needed if read is not None and needed else None
        metric = f"K = {kmax}, --budget {budget}%: base bytes read / base chunks the plan computes from"
        found.append(target(metric, v, "≤ 1", at_most(1), "{:.3f}"))
    return found


def merge_targets(merged: Sequence[Merged[MergeRun]], ks: Sequence[int]) -> list[Target]:
    """The merge targets, where this run measured what they need (a method not run has none)."""
    found = []
    methods = {m.run.method for m in merged}

    def seconds(k: int, method: str, tool: str, budget: int | None = None, checkout: bool = True) -> float | None:
        m = find(merged, MergeRun(k, method, tool, budget, checkout))
        return None if m is None else m.proc.seconds

    def ratio(a: float | None, b: float | None) -> float | None:
        return a / b if a is not None and b is not None else None

    ta, kmax = BUDGET_METHOD, max(ks)
    if ta in methods:
        for checkout, bound in ((False, 15.0), (True, 8.0)):
            v = ratio(seconds(kmax, ta, "mergekit"), seconds(kmax, ta, "mgit", 10, checkout))
            mode = "checked out" if checkout else "--no-checkout"
            metric = f"K = {kmax}, {ta} --budget 10%, {mode}: × faster than mergekit"
            found.append(target(metric, v, f"≥ {bound:g}", at_least(bound)))
        for checkout in (False, True):
            v = ratio(seconds(kmax, ta, "mgit", 10, checkout), seconds(kmax, ta, "mgit", None, checkout))
            mode = "checked out" if checkout else "--no-checkout"
            found.append(target(f"K = {kmax}, --budget 10% ({mode}): wall time / mgit exact", v, "≤ 0.2", at_most(0.2)))
        for k in ks:
            v = ratio(seconds(k, ta, "mergekit"), seconds(k, ta, "mgit"))
            found.append(target(f"K = {k}, {ta} exact: × faster than mergekit", v, "≥ 2", at_least(2)))
    k_ties = 8 if 8 in ks else kmax
    if "ties" in methods:
        v = ratio(seconds(k_ties, "ties", "mergekit"), seconds(k_ties, "ties", "mgit"))
        found.append(target(f"K = {k_ties}, ties exact: × faster than mergekit", v, "≥ 2.5", at_least(2.5)))
    mgit_rss = [m.proc.max_rss for m in merged if m.run.tool == "mgit"]
    v = max(mgit_rss) / MB if mgit_rss else None
    found.append(target("mgit merge peak RSS, largest of all runs (MB)", v, "≤ 1000", at_most(1000), "{:.0f}"))
    return found + read_targets(merged, kmax)


def store_targets(stored: Sequence[Result]) -> list[Target]:
    """The storage targets, where this run measured what they need."""
    found = []
    steps = {(r.tool, r.step): r.best.seconds for r in stored}
    for what in STORE_STEPS:
        mg, lfs, dvc = (
            steps.get((t, f"{lbl}: {what}"))
            for t, lbl in (("mgit", "add + commit"), ("git + git-lfs", "add + commit"), ("dvc", "add"))
        )
        v = lfs / mg if mg and lfs else None
        found.append(target(f"mgit add + commit, {what}: × faster than git + git-lfs", v, "≥ 2", at_least(2)))
        v = dvc / mg if mg and dvc else None
        found.append(target(f"mgit add + commit, {what}: × faster than dvc add", v, "≥ 1", at_least(1)))
    co = next((r for r in stored if r.tool == "mgit" and r.store_bytes is None), None)
    cp = next((r for r in stored if r.tool == "cp -r"), None)
    v = co.best.seconds / cp.best.seconds if co and cp else None
    found.append(target("mgit checkout time / cp -r time", v, "≤ 2.5", at_most(2.5)))
    return found


def plot(merged: Sequence[Merged[MergeRun]], ks: Sequence[int], budgets: Sequence[int], title: str) -> Figure:
    """Wall time against the budget (exact at the right), per K: mgit checked out (solid) and with
    --no-checkout (dashed), mergekit a dotted horizontal line."""
    exact_x = 100.0
    series, hlines = [], []
    for i, k in enumerate(ks):
        color = PALETTE[i % len(PALETTE)]
        for checkout, dash, marker in ((True, SOLID, "o"), (False, DASHED, "s")):
            pts = [
                (float(m.run.budget or exact_x), m.proc.seconds)
                for m in merged
                if m.run.k == k
                and m.run.method == BUDGET_METHOD
                and m.run.tool == "mgit"
                and m.run.checkout == checkout
            ]
            if pts:
                label = f"K = {k}: mgit merge" + ("" if checkout else " --no-checkout")
                series.append(Series(label, pts, color, dash, marker))
        if mk := find(merged, MergeRun(k, BUDGET_METHOD, "mergekit")):
            hlines.append(HLine(f"K = {k}: mergekit-yaml", mk.proc.seconds, color))
    ticks = [(float(b), f"{b}%") for b in sorted(budgets)] + [(exact_x, "exact")]
    return line_chart(
        series,
        hlines,
        title=title,
        x_label="read budget (share of the exact merge's expert bytes)",
        y_label="wall time (s)",
        x_ticks=ticks,
        log_x=True,
    )


@dataclass
class Context:
    command: str
    quick: bool
    plan: ModelPlan
    raw: int
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    workdir: Path
    reps: int
    cold: bool
    cache_note: str
    example_cmds: list[str]
    image: str  # the SVG, relative to benchmarks/results/
    methods: tuple[str, ...] = tuple(METHODS)  # the merge methods run


def model_line(c: Context) -> str:
    s = c.plan.shape
    return (
        f"a generated llama-like bf16 base model of {c.raw / GB:.3f} GB ({c.plan.layers} layers, hidden "
        f"{s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, {len(c.plan.tensors)} tensors, weights "
        f"N(0, 0.02) from seed {SEED}, norms ones; sharded in up to {SHARDS} safetensors files with index and "
        "config)"
    )


def how_measured(c: Context) -> str:
    return (
        "How it was measured: every step is a separate process timed by wall clock, after untimed waits until no "
        f"other benchmark of this repository runs and under {IDLE_BELOW:.0%} of the CPUs are busy, and an untimed "
        "`sync`"
        + (", then the page cache dropped" if c.cold else "")
        + ". "
        + (
            f"Each step ran {c.reps} times; the time columns show every run, the others the fastest. "
            if c.reps > 1
            else "Each step ran once. "
        )
        + "Peak RSS as the kernel reports it (`wait4`, the process and its children), in parentheses the sampled "
        "peak of its anonymous part. write_bytes counts pages dirtied for writing (also those deleted before "
        "writeback). Other load is the share of all CPUs that other processes used meanwhile."
    )


def section(
    title: str, c: Context, part: Part, inputs: str, body: list[str], targets: list[Target], after: Sequence[str] = ()
) -> str:
    """One part's docs section: its header, ``inputs`` and the page cache, ``body``, its targets, ``after``,
    how it was measured and what it skipped."""
    lines = [*header_lines(title, c.command, c.workdir, part.versions, took(part.wall, part.waited))]
    if c.quick:
        lines += ["**A `--quick` run** (a smoke test at a small size; the full run's numbers replace it).", ""]
    lines += [f"Input: {model_line(c)} and {inputs}", "", f"Page cache: {c.cache_note}", "", *body]
    lines += ["Targets (what mgit must reach at this size; reported, not asserted):", "", targets_table(targets), ""]
    lines += [*after, how_measured(c)]
    if part.skipped:
        lines += ["", "Skipped: " + "; ".join(part.skipped) + "."]
    return "\n".join(lines) + "\n"


def store_section(stored: Sequence[Result], c: Context, part: Part) -> str:
    inputs = f"a dense fine-tune of it (every tensor + N(0, ({DENSE_NOISE:.0%} σ)²))."
    body = [
        "Per tool, in a fresh directory holding a copy of the base: store the base, overwrite the model directory "
        "with the dense fine-tune and store it, delete the model directory and materialise it again (the "
        "fine-tune); `cp -r` copies the fine-tune's directory. × faster than git-lfs compares the same step; "
        "time / cp -r the checkouts. Store: `du -s` of `.mgit/`, `.git/`, `.dvc/cache` after the step (both "
        "versions after the second).",
        "",
        store_table(stored, c.raw),
        "",
    ]
    return section(STORE_TITLE, c, part, inputs, body, store_targets(stored))


def merge_section(merged: Sequence[Merged[MergeRun]], c: Context, part: Part) -> str:
    kmax = max(c.ks)
    inputs = (
        f"{kmax} experts made like fine-tunes as in bench_merge.py (a random third of the tensors left byte for "
        "byte as the base's, every other tensor + Gaussian noise at a scale drawn log-uniformly from "
        f"1e{SCALE_DECADES[0]:.0f} to 1e{SCALE_DECADES[1]:.0f} of its std; seeds {EXPERT_SEED + 1}…"
        f"{EXPERT_SEED + kmax})."
    )
    runs = []
    if BUDGET_METHOD in c.methods:
        runs.append(f"{BUDGET_METHOD} exact and under `--budget B%` (of the expert bytes the exact merge reads)")
    runs += [
        f"{m} ({', '.join(f'{k} {v:g}' for k, v in METHODS[m].items())}) exact" for m in c.methods if m != BUDGET_METHOD
    ]
    body = [
        f"Merges of experts 1..K, weights 1/K, bf16: {', '.join(runs)}; mergekit reads the model directories, "
        "mgit has the base on `main` and expert N on branch `expert-N` of one repository, and each merge starts "
        "from a checkout of `main`. A checked-out merge also writes the merged model into the working tree; "
        "with `-b NAME --no-checkout` it only commits; those run in a copy of the repository made before the "
        "first merge (sharing its sealed packs by hard link), so neither variant finds the other's result "
        "already stored. Read from / written to disk: the process's (and its children's) `read_bytes` / "
        "`write_bytes` in `/proc/<pid>/io`; bytes the tool reads: mergekit's input files, mgit's merge record "
        "(`plan.bytes`, stored chunk bytes of the base and the experts), which also counts the output chunks it "
        "computed and those it carried over from the base unread. Equal to mergekit: the checked-out exact "
        "merge's tensors (`Repository.state_dict`) against mergekit's output, bit for bit.",
        "",
        merges_table(merged),
        "",
        *([f"![wall time against the budget]({c.image})", ""] if BUDGET_METHOD in c.methods else []),
    ]
    commands = (
        [
            f"Commands, e.g. at K = {kmax} (paths relative to the repository root):",
            "",
            "```",
            *c.example_cmds,
            "```",
            "",
        ]
        if c.example_cmds
        else []
    )
    return section(merge_title(c.methods), c, part, inputs, body, merge_targets(merged, c.ks), commands)


# -- main -----------------------------------------------------------------------------------


def cache_note(cold: bool, warm: bool) -> str:
    """What the report says of the page cache."""
    if cold:
        return (
            "dropped (`sync; echo 3 > /proc/sys/vm/drop_caches`) before every timed step (before the first command "
            "of a step of several, e.g. add + commit): every tool reads its inputs from the disk."
        )
    if warm:
        return "left warm (`--warm`): files written or read minutes before may be read from memory."
    return "**could not be dropped** (not root): files written or read minutes before may be read from memory."


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    command = cli.command_line(argv, __file__)
    workdir = args.workdir.resolve()
    plan = plan_layers(NAMED_SHAPES[args.shape], args.layers)
    ks, budgets, parts = args.ks, args.budgets, args.parts
    cold = not args.warm and can_drop_caches()
    outputs = merge_outputs(ks, budgets, args.methods)
    need = scale_disk.disk_need(plan.nbytes, ks, parts, not args.no_mergekit, outputs)
    cached = scale_disk.cached_inputs(workdir, plan, parts)
    print(scale_disk.describe_need(need, cached, cli.free_disk(workdir)), flush=True)
    cli.check_free_disk(workdir, scale_disk.disk_total(need, cached), "pass --quick, fewer --ks or --layers")
    lock_workdir(workdir, "bench_scale.py")
    store, merge = Part(), Part()
    stored: list[Result] = []
    raw = plan.nbytes
    if "store" in parts:
        stored, raw = run_store_part(args, workdir, plan, cold, store)
    merged: list[Merged[MergeRun]] = []
    example: list[str] = []
    if "merge" in parts:
        merged, example = run_merge_part(args, workdir, plan, cold, merge)
    docs_svg = docs_image(args.methods)
    image = workdir / docs_svg.name
    note, image_name = cache_note(cold, args.warm), os.path.relpath(docs_svg, docs_svg.parent)
    ctx = Context(
        command,
        args.quick,
        plan,
        raw,
        ks,
        budgets,
        workdir,
        args.reps,
        cold,
        note,
        example,
        image_name,
        tuple(args.methods),
    )
    sections = []  # (title, text, after): one per part run; a part not run keeps its section in the docs
    plotted = bool(merged) and BUDGET_METHOD in args.methods  # the plot shows the budgeted method only
    if merged:
        sections.append((merge_title(args.methods), merge_section(merged, ctx, merge), MERGE_TITLE))
    if plotted:
        kind = " (--quick)" if args.quick else ""
        plot_title = f"{BUDGET_METHOD}, {plan.nbytes / GB:.2f} GB bf16 base{kind}: wall time against the read budget"
        save(plot(merged, ks, budgets, plot_title), image)
    if stored:
        sections.append((STORE_TITLE, store_section(stored, ctx, store), None))
    for _, text, _ in sections:
        print()
        print(text)
    if plotted:
        print(f"plot: {image}")
    if args.write_docs:
        for title, text, after in sections:
            update_results(text, title, after=after)
        if plotted:
            shutil.copyfile(image, docs_svg)
        print(f"updated benchmarks/results/bench_scale.md{' and ' + relative(str(docs_svg)) if plotted else ''}")
    bad = [m for m in merged if m.same is not None and not m.same.bit_identical]
    broken = [r for r in stored if r.identical is False]
    return 1 if bad or broken else 0


if __name__ == "__main__":
    sys.exit(main())
