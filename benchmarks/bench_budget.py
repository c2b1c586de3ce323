"""Budget benchmark: `mgit merge --budget` against the exact merge, a uniform-random pick and mergekit.

Why: mgit claims that a merge under a read budget spends the bytes where they matter. Its plan
knows, from the commits' statistics and without reading tensor data, how much each differing
expert chunk moves the result (|weight| × ‖Δ‖), so under a budget it reads the chunks that carry
most of the change and skips the rest; the result is close to the exact merge at a fraction of
the reads, and at a 100% budget it *is* the exact merge, bit for bit. mergekit (`mergekit-yaml`)
reads every expert in full. This script checks speed, bytes and error in one run:

1. generate a llama-like bf16 base model of about 0.25 GB (bench_core's generator, fixed seed,
   cached) and 16 experts from it as bench_merge does: a third of the tensors frozen (byte for
   byte the base's), every other tensor moved by Gaussian noise whose scale, relative to the
   tensor's std, is drawn log-uniformly per tensor over 1e-4 … 1e-1 (cached);
2. install mergekit from PyPI into its own virtual environment (created when missing);
3. commit the base on `main` and each expert on a branch `expert-N` of one fresh mgit
   repository (untimed);
4. for K = 2, 4, 8, 16 (experts 1..K; task_arithmetic, weights 1/K, lambda 1), time, each a
   separate process after untimed waits for other benchmarks and an idle machine:
   `mergekit-yaml` on the model directories (full read), `mgit merge` exact, and `mgit merge
   --budget B%` at 100%, 50%, 25% and 10%, with the importance-ranked plan and (below 100%)
   with `--budget-select uniform` (chunks drawn uniformly at random, seeded) at the same budget;
   count the bytes each read (mgit: its merge record, `mgit show --json`; mergekit: the files
   it loads);
5. in a child process, load every result (`Repository.state_dict`; mergekit's safetensors) and
   compute in float64, over all tensors, the relative error ‖M − M_full‖ / ‖M_full − base‖
   against the exact merge M_full, and which results equal it bit for bit;
6. print Markdown tables, draw the curves (relative error and wall time against the budget) as
   a PNG and, with ``--write-docs``, replace this benchmark's section of
   benchmarks/results/bench_budget.md and write the PNG to benchmarks/results/img/bench_budget.png.

Targets (at K = 16 and a 10% budget ≥ 5× faster than mergekit end to end; at every budget the
importance-ranked plan's error ≤ half the uniform pick's; at 100% bit-equal to the exact merge)
are reported, never asserted. The page cache cannot be dropped: both tools read warm files.
GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import json
import math
import os
import shlex
import shutil
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from harness import cli, merges
from harness.machine import IDLE_BELOW, lock_workdir
from harness.merges import Setup
from harness.models import GB, MB, SEED, SHARDS, ModelPlan, model_bytes, safetensors_bytes, split_shards
from harness.report import REPO_ROOT, RESULTS_DIR, fmt_rss, header_lines, publish, relative, table, took
from harness.runner import Proc, Runner, best_of
from harness.tools import json_output, mergekit_cmd, script_child
from harness.variants import EXPERT_SEED, SCALE_DECADES, frozen_byte_share

SECTION_TITLE = "## Merge under a read budget (bench_budget.py)"
READING_THE_TARGETS = (
    "Reading the targets. A budget shrinks only the expert reads: a budgeted merge still starts a Python "
    "process that imports torch, reads and decodes every base chunk, merges every element, and hashes, "
    "stores and checks out the whole merged model, so its wall time stays well above what the expert bytes "
    "alone would suggest (compare the 10% rows with the exact ones). The error targets meet the experts' "
    "shape: most of Σ‖Δ‖² sits in the few tensors with the largest noise, whose chunks compress worst, so "
    "a small budget cannot cover them; the '(for information)' rows give the lowest ratio any choice of "
    "whole chunks within the budget could reach (from the plan's `captured_share_max`, the fractional "
    "knapsack's optimum), which is what a better planner could at best approach."
)
DOCS_IMAGE = RESULTS_DIR / "img" / "bench_budget.png"
METHOD = "task_arithmetic"
LAMBDA = 1.0
KS, QUICK_KS = (2, 4, 8, 16), (2, 4)
BUDGETS = (100, 50, 25, 10)  # percent of the expert bytes the exact merge reads
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 0.25, 0.1
SELECT_SEED = SEED  # --seed of every mgit merge: what `--budget-select uniform` draws from
TARGET_K, TARGET_BUDGET, TARGET_SPEEDUP, TARGET_ERROR_RATIO = 16, 10, 5.0, 0.5


# -- the runs -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One merge of experts 1..k: mergekit's, or mgit's exact (budget None) or under a budget (percent)."""

    k: int
    tool: str  # "mergekit" or "mgit"
    budget: int | None = None
    select: str | None = None  # "importance" or "uniform", with a budget

    @property
    def weight(self) -> float:
        return 1 / self.k

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


def runs_for(k: int, budgets: Sequence[int]) -> list[Run]:
    """mergekit, mgit exact, then per budget (largest first) the importance plan and the uniform pick."""
    runs = [Run(k, "mergekit"), Run(k, "mgit")]
    for b in budgets:
        runs.append(Run(k, "mgit", b, "importance"))
        if b < 100:  # at 100% every chunk is read, however they are picked
            runs.append(Run(k, "mgit", b, "uniform"))
    return runs


def mergekit_config(k: int, base: Path, experts: Sequence[Path]) -> str:
    """mergekit's YAML (JSON is YAML): base, experts 1..k with weight 1/k, lambda 1, bf16."""
    doc = {
        "merge_method": METHOD,
        "base_model": str(base),
        "models": [{"model": str(e), "parameters": {"weight": 1 / k}} for e in experts[:k]],
        "parameters": {"lambda": LAMBDA},
        "dtype": "bfloat16",
    }
    return json.dumps(doc, indent=2) + "\n"


def mgit_merge_cmd(mgit: list[str], run: Run) -> list[str]:
    budget = [] if run.budget is None else [f"--budget={run.budget}%", f"--budget-select={run.select}"]
    experts = [f"expert-{i}" for i in range(1, run.k + 1)]
    return [*mgit, "-q", "merge", f"--method={METHOD}", f"--weights={run.weight!r}", f"--lambda={LAMBDA!r}",
            "--dtype=BF16", *budget, f"--seed={SELECT_SEED}", "--base=main", "-b", run.branch,
            "-m", f"bench {run.branch}", *experts]  # fmt: skip


def has_budget(mgit: list[str]) -> bool:
    """Whether the mgit under test's `merge` takes --budget and --budget-select."""
    res = subprocess.run([*mgit, "merge", "--help"], capture_output=True, text=True)
    return "--budget-select" in res.stdout


# -- the errors ---------------------------------------------------------------------------


def errors_main() -> None:
    """In a child (``python -c``): every result against the exact merge; prints JSON.

    argv: repository, base revision, exact revision, mergekit's output directory ('' for none),
    then the revisions to compare. Sums of squares are float64, over all tensors.
    """
    import torch
    from safetensors import safe_open

    from mgit import Repository

    repo_dir, base_rev, exact_rev, out_dir, *revs = sys.argv[1:]

    def against(full: dict[str, torch.Tensor], ours: dict[str, torch.Tensor]) -> dict[str, Any]:
        sq, identical, problems = 0.0, 0, sorted(set(ours) - set(full))
        for name, f in full.items():
            m = ours.get(name)
            if m is None or m.dtype != f.dtype or m.shape != f.shape:
                problems.append(name)
                continue
            identical += bool(torch.equal(m.reshape(-1).view(torch.uint8), f.reshape(-1).view(torch.uint8)))
            sq += float((m.double() - f.double()).square().sum())
        return {"sq": sq, "identical": identical, "tensors": len(full), "problems": problems}

    out: dict[str, Any] = {}
    with Repository(repo_dir) as repo:
        base = repo.state_dict(base_rev)
        full = repo.state_dict(exact_rev)
        out["denominator"] = sum(float((t.double() - base[n].double()).square().sum()) for n, t in full.items())
        del base
        for rev in revs:
            out[rev] = against(full, repo.state_dict(rev))
    if out_dir:
        theirs = {}
        for path in sorted(Path(out_dir).glob("*.safetensors")):
            with safe_open(str(path), framework="pt") as f:
                theirs.update({name: f.get_tensor(name) for name in f.keys()})
        out["mergekit"] = against(full, theirs)
    print(json.dumps(out))


@dataclass
class Compared:
    rel_error: float  # ‖M − M_full‖ / ‖M_full − base‖ over all tensors
    identical: int  # tensors bit-equal to the exact merge's
    tensors: int
    problems: list[str]  # tensors missing on one side or of another dtype/shape

    @property
    def bit_equal(self) -> bool:
        return not self.problems and self.identical == self.tensors


def compare(
    runner: Runner, mgit: list[str], repo: Path, exact: str, revs: Sequence[str], out: Path | None
) -> tuple[float, dict[str, Compared]]:
    """(‖M_full − base‖, per revision and "mergekit": the comparison with the exact merge)."""
    code = "from bench_budget import errors_main; errors_main()"
    proc = runner.run(script_child(mgit, code, str(repo), "main", exact, str(out or ""), *revs), repo)
    doc = json.loads(proc.output.strip().splitlines()[-1])
    denom = math.sqrt(doc.pop("denominator"))
    found = {}
    for key, c in doc.items():
        rel = math.sqrt(c["sq"]) / denom if denom else math.nan
        found[key] = Compared(rel, c["identical"], c["tensors"], c["problems"])
    return denom, found


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Measured:
    run: Run
    proc: Proc
    times: list[float]
    expert_bytes: int  # expert bytes read (mergekit: the experts' files; mgit: experts_measured)
    total_bytes: int  # and the base's
    record: dict[str, Any] = field(default_factory=dict)  # mgit's merge record (`plan` of `mgit show --json`)
    same: Compared | None = None  # against the exact merge

    @property
    def rel_error(self) -> float | None:
        return None if self.same is None else self.same.rel_error


def run_mergekit(s: Setup, run: Run) -> tuple[Measured, Path]:
    config = s.scratch / f"mergekit-{run.k}.yml"
    config.write_text(mergekit_config(run.k, s.base, s.experts))
    out = s.scratch / f"mergekit-{run.k}"
    cmd = mergekit_cmd(s.mergekit, config, out)
    best, times = best_of(
        s.reps, lambda: shutil.rmtree(out, ignore_errors=True), lambda: s.runner.run(cmd, s.scratch, timed=True)
    )
    experts = safetensors_bytes(s.experts[: run.k])
    return Measured(run, best, times, experts, experts + safetensors_bytes([s.base])), out


def run_mgit(s: Setup, run: Run) -> Measured:
    made = False

    def prepare() -> None:
        nonlocal made
        s.runner.run([*s.mgit, "-q", "checkout", "main"], s.repo)  # every merge starts from the base's tree
        if made:  # the previous repetition's branch
            s.runner.run([*s.mgit, "-q", "branch", "-D", run.branch], s.repo)
        made = True

    best, times = best_of(s.reps, prepare, lambda: s.runner.run(mgit_merge_cmd(s.mgit, run), s.repo, timed=True))
    record = json_output(s.runner.run([*s.mgit, "show", "--json", run.branch], s.repo).output)["plan"]
    b = record["bytes"]
    return Measured(run, best, times, b["experts_measured"], b["base_measured"] + b["experts_measured"], record)


def bench_k(s: Setup, k: int, budgets: Sequence[int]) -> tuple[list[Measured], float]:
    """Every run for experts 1..k, compared with the exact merge; and ‖M_full − base‖."""
    found: list[Measured] = []
    out = None
    for run in runs_for(k, budgets):
        print(f"K = {k}, {run.label}" + (f" at {run.budget}%" if run.budget else "") + " ...", flush=True)
        if run.tool == "mergekit":
            m, out = run_mergekit(s, run)
        else:
            m = run_mgit(s, run)
        print(f"  {m.proc.seconds:.1f} s, {fmt_rss(m.proc)} MB, read {m.total_bytes / GB:.3f} GB", flush=True)
        found.append(m)
    print(f"K = {k}: comparing every result with the exact merge ...", flush=True)
    exact = Run(k, "mgit").branch
    revs = [m.run.branch for m in found if m.run.tool == "mgit" and m.run.budget is not None]
    denom, same = compare(s.runner, s.mgit, s.repo, exact, revs, out)
    tensors = same["mergekit"].tensors
    for m in found:
        if m.run.tool == "mergekit":
            m.same = same["mergekit"]
        elif m.run.budget is None:
            m.same = Compared(0.0, tensors, tensors, [])  # the reference itself
        else:
            m.same = same[m.run.branch]
        if m.run.budget is not None and m.run.budget < 100:
            print(f"  {m.run.label} {m.run.budget_cell}: relative error {fmt_err(m.rel_error)}", flush=True)
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    return found, denom


# -- reporting ----------------------------------------------------------------------------


def fmt_err(e: float | None) -> str:
    if e is None or math.isnan(e):
        return "?"
    return "0" if e == 0 else f"{e:.3g}"


def equal_cell(m: Measured) -> str:
    c = m.same
    if c is None:
        return "?"
    if m.run.tool == "mgit" and m.run.budget is None:
        return "(reference)"
    if c.bit_equal:
        return "yes"
    missing = f", {len(c.problems)} missing/mismatched" if c.problems else ""
    return f"no ({c.identical}/{c.tensors} tensors equal{missing})"


def find(
    results: Sequence[Measured], k: int, tool: str, budget: int | None = None, select: str | None = None
) -> Measured | None:
    return next((m for m in results if m.run == Run(k, tool, budget, select)), None)


def results_table(results: list[Measured]) -> str:
    header = ["K", "run", "budget", "expert bytes read (GB)", "total bytes read (GB)", "wall time (s)",
              "speedup over mergekit (×)", "peak RSS (MB)", "relative error", "bit-equal to exact",
              "other load"]  # fmt: skip
    rows = []
    for m in results:
        mk = find(results, m.run.k, "mergekit")
        rows.append([
            str(m.run.k),
            m.run.label,
            m.run.budget_cell,
            f"{m.expert_bytes / GB:.3f}",
            f"{m.total_bytes / GB:.3f}",
            " / ".join(f"{t:.1f}" for t in m.times),
            f"{mk.proc.seconds / m.proc.seconds:.2f}" if mk and m.run.tool == "mgit" else "",
            fmt_rss(m.proc),
            fmt_err(m.rel_error),
            equal_cell(m),
            f"{m.proc.load_share:.0%}",
        ])  # fmt: skip
    return table(header, "rlrrrrrrrlr", rows)


def plans_table(results: list[Measured], denominators: dict[int, float]) -> str:
    """What each budgeted plan promised (its record's `budget`) beside what the run read and missed."""
    header = ["K", "select", "budget", "limit (GB)", "planned (GB)", "read (GB)", "within limit",
              "chunks read / candidates", "captured share", "most possible", "√(1 − captured)", "relative error",
              "error bound (relative)", "≤ bound", "rounding allowance (relative)", "≤ bound + allowance",
              "analyze step (pairs / GB)"]  # fmt: skip
    rows = []

    def within(err: float | None, limit: float | None) -> str:
        if err is None or limit is None or math.isnan(err):
            return "n/a"
        return "yes" if err <= limit else "**no**"

    for m in results:
        b = m.record.get("budget")
        if not b:
            continue
        denom = denominators.get(m.run.k) or math.nan
        bound, allowance = b.get("error_bound"), b.get("rounding_allowance")
        analyze = b.get("analyze") or {}
        err = None if m.rel_error is None else m.rel_error * denom  # ‖M − M_full‖
        rows.append([
            str(m.run.k),
            str(b.get("select", m.run.select)),
            m.run.budget_cell,
            f"{b['limit_bytes'] / GB:.3f}",
            f"{b['expert_bytes_planned'] / GB:.3f}",
            f"{m.expert_bytes / GB:.3f}",
            "yes" if m.expert_bytes <= b["limit_bytes"] else "**no**",
            f"{b['chunks_chosen']} / {b['chunks_candidate']}",
            f"{b['captured_share']:.3f}",
            f"{b['captured_share_max']:.3f}" if "captured_share_max" in b else "n/a",
            fmt_err(math.sqrt(max(0.0, 1 - b["captured_share"]))),
            fmt_err(m.rel_error),
            "n/a" if bound is None else fmt_err(bound / denom),
            within(err, bound),
            "n/a" if allowance is None else fmt_err(allowance / denom),
            within(err, None if bound is None else bound + (allowance or 0.0)),
            f"{analyze.get('pairs', 0)} / {analyze.get('bytes_read', 0) / GB:.3f}",
        ])  # fmt: skip
    return table(header, "rlrrrrlrrrrrrlrlr", rows)


def error_ratio(results: list[Measured], k: int, budget: int) -> float | None:
    imp, uni = find(results, k, "mgit", budget, "importance"), find(results, k, "mgit", budget, "uniform")
    if not imp or not uni or imp.rel_error is None or not uni.rel_error:
        return None
    return imp.rel_error / uni.rel_error


def best_ratio(results: list[Measured], k: int, budget: int) -> float | None:
    """√(1 − the most any plan can capture at this budget) over the uniform pick's error: what no
    choice of chunks can beat (the error tracks √(1 − captured share), see the plans table)."""
    imp, uni = find(results, k, "mgit", budget, "importance"), find(results, k, "mgit", budget, "uniform")
    if not imp or not uni or not uni.rel_error or "captured_share_max" not in imp.record.get("budget", {}):
        return None
    return math.sqrt(max(0.0, 1 - imp.record["budget"]["captured_share_max"])) / uni.rel_error


def targets_table(results: list[Measured], ks: Sequence[int], budgets: Sequence[int]) -> str:
    rows = []

    def row(metric: str, shown: str, target: str, ok: bool | None) -> None:
        rows.append([metric, shown, target, "n/a" if ok is None else "yes" if ok else "**no**"])

    k = TARGET_K if TARGET_K in ks else max(ks)
    note = "" if k == TARGET_K else f" (K = {TARGET_K} not run)"
    mk, cheap = find(results, k, "mergekit"), find(results, k, "mgit", TARGET_BUDGET, "importance")
    if mk and cheap:
        speedup = mk.proc.seconds / cheap.proc.seconds
        row(f"K = {k}{note}, budget {TARGET_BUDGET}%: mgit faster than mergekit, end to end (×)",
            f"{speedup:.2f}", f"≥ {TARGET_SPEEDUP:g}", speedup >= TARGET_SPEEDUP)  # fmt: skip
    for b in (b for b in budgets if b < 100):
        ratios = {kk: r for kk in ks if (r := error_ratio(results, kk, b)) is not None}
        if ratios:
            worst = max(ratios, key=lambda kk: ratios[kk])
            row(f"budget {b}%: importance error / uniform error (worst K: {worst})", f"{ratios[worst]:.3f}",
                f"≤ {TARGET_ERROR_RATIO:g}", ratios[worst] <= TARGET_ERROR_RATIO)  # fmt: skip
            best = best_ratio(results, worst, b)
            if best is not None:
                metric = (
                    f"(for information) budget {b}%, K = {worst}: the lowest ratio any choice of chunks "
                    "within the budget can reach, √(1 − captured_share_max) / uniform error"
                )
                row(metric, f"{best:.3f}", "", None)
    if 100 in budgets:
        full = {kk: find(results, kk, "mgit", 100, "importance") for kk in ks}
        bad = [kk for kk, m in full.items() if not (m and m.same and m.same.bit_equal)]
        shown = "yes, every K" if not bad else "no at K = " + ", ".join(map(str, bad))
        row("budget 100%: bit-equal to the exact merge", shown, "yes", not bad)
    mks = {kk: find(results, kk, "mergekit") for kk in ks}
    bad = [kk for kk, m in mks.items() if not (m and m.same and m.same.bit_equal)]
    shown = "yes, every K" if not bad else "no at K = " + ", ".join(map(str, bad))
    row("(for information) mgit exact bit-equal to mergekit", shown, "(yes)", not bad)
    return table(["metric", "value", "target", "met"], "lrrl", rows)


def plot(results: list[Measured], ks: Sequence[int], budgets: Sequence[int], path: Path) -> None:
    """Relative error (importance vs uniform) and wall time (mergekit a line) against the budget, per K."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D
    from matplotlib.ticker import FixedLocator, NullLocator

    fig, (ax_err, ax_time) = plt.subplots(1, 2, figsize=(11.5, 4.4))
    styles = {"importance": ("-", "o"), "uniform": ("--", "x")}
    for i, k in enumerate(ks):
        color = f"C{i}"
        for select, (ls, marker) in styles.items():
            runs = sorted(
                (m for m in results if m.run.k == k and m.run.select == select), key=lambda m: m.run.budget or 0
            )
            errs = [(m.run.budget, m.rel_error) for m in runs if (m.run.budget or 100) < 100 and m.rel_error]
            if errs:
                ax_err.plot(*zip(*errs, strict=True), ls=ls, marker=marker, color=color)
            times = [(m.run.budget, m.proc.seconds) for m in runs]
            if times:
                ax_time.plot(*zip(*times, strict=True), ls=ls, marker=marker, color=color)
        if mk := find(results, k, "mergekit"):
            ax_time.axhline(mk.proc.seconds, ls=":", color=color)
        if exact := find(results, k, "mgit"):
            ax_time.plot([100], [exact.proc.seconds], ls="none", marker="*", markersize=10, color=color)
    shown = sorted(budgets)
    for ax, title in ((ax_err, "relative error ‖M − M_full‖ / ‖M_full − base‖"), (ax_time, "wall time (s)")):
        ax.set_xscale("log")
        ax.xaxis.set_major_locator(FixedLocator(shown if ax is ax_time else [b for b in shown if b < 100]))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticklabels([f"{b}%" for b in (shown if ax is ax_time else [b for b in shown if b < 100])])
        ax.set_xlabel("budget (share of the expert bytes the exact merge reads)")
        ax.set_title(title, fontsize=10)
        ax.grid(True, which="both", alpha=0.3)
    ax_err.set_yscale("log")
    ax_time.set_ylim(bottom=0)
    k_handles = [Line2D([], [], color=f"C{i}", label=f"K = {k}") for i, k in enumerate(ks)]
    err_handles = [Line2D([], [], color="grey", ls=ls, marker=mk, label=s) for s, (ls, mk) in styles.items()]
    time_handles = [
        *err_handles,
        Line2D([], [], color="grey", ls="none", marker="*", markersize=10, label="mgit exact"),
        Line2D([], [], color="grey", ls=":", label="mergekit (full read)"),
    ]
    ax_err.legend(handles=k_handles + err_handles, fontsize=8)
    ax_time.legend(handles=k_handles + time_handles, fontsize=8, ncols=2)
    fig.suptitle(f"{METHOD} of K experts under a read budget (100%: bit-equal to the exact merge)", fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    plt.close(fig)


@dataclass
class Context:
    command: str
    versions: dict[str, str]
    plan: ModelPlan
    raw: int
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    workdir: Path
    reps: int
    example_cmds: list[str]
    rss_floor: int
    wall: float  # seconds the whole run took, waits for other benchmarks excluded
    waited: float  # seconds spent waiting for other benchmarks
    denominators: dict[int, float]  # K → ‖M_full − base‖
    image: str  # the PNG, relative to benchmarks/results/


def report(results: list[Measured], c: Context) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    s = c.plan.shape
    count = max(c.ks)
    shares = [frozen_byte_share(c.plan, k) for k in range(1, count + 1)]
    lines = [
        *header_lines(SECTION_TITLE, c.command, c.workdir, c.versions, took(c.wall, c.waited)),
        f"Input: a generated llama-like bf16 base model of {c.raw / GB:.3f} GB ({c.plan.layers} layers, hidden "
        f"{s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, {len(c.plan.tensors)} tensors, weights "
        f"N(0, 0.02) from seed {SEED}, norms ones; {len(split_shards(c.plan.tensors, SHARDS))} safetensors shards, "
        f"index and a `LlamaForCausalLM` config.json) and {count} experts made from it like fine-tunes (as in "
        "bench_merge.py): each leaves a random third of the tensors byte for byte as the base's "
        f"({min(shares):.0%}–{max(shares):.0%} of the bytes) and adds Gaussian noise to every other tensor, at a "
        f"scale drawn log-uniformly per tensor from 1e{SCALE_DECADES[0]:.0f} to 1e{SCALE_DECADES[1]:.0f} of the "
        f"tensor's std (of its RMS for the norms), then rounds to bf16 (seeds {EXPERT_SEED + 1}…"
        f"{EXPERT_SEED + count}). Merges: {METHOD} of experts 1..K, weights 1/K, lambda {LAMBDA:g}, bf16; "
        f"mgit with `--seed {SELECT_SEED}` (what the uniform pick draws from). A budget of B% caps the expert "
        "bytes read at B% of what the exact merge reads (`plan.budget.expert_bytes_full`); base reads are "
        "outside it.",
        "",
        results_table(results),
        "",
        targets_table(results, c.ks, c.budgets),
        "",
        READING_THE_TARGETS,
        "",
        f"![relative error and wall time against the budget]({c.image})",
        "",
        "Left: relative error of the budgeted merges (importance-ranked plan solid, uniform-random pick dashed; "
        "at 100% both read everything and the result is the exact merge, error 0). Right: wall time; mgit "
        "exact as a star, mergekit's full read as a dotted line in the same colour.",
        "",
        "**The plans** (the merge record's `budget`, `mgit show --json`): the limit in bytes (`limit_bytes`), "
        "the expert bytes the plan chose (`expert_bytes_planned`) and those the run read "
        "(`bytes.experts_measured`), the chunks chosen of those that differ from the base (`chunks_chosen`, "
        "`chunks_candidate`), and the captured share (`captured_share`: Σ (|a|·‖Δ‖)² over chosen chunks ÷ the "
        "same over all candidates) beside the most any choice of chunks within the limit can capture "
        "(`captured_share_max`, the fractional knapsack's optimum). Chunks are disjoint and the experts' "
        "noise independent, so the relative "
        "error should be about √(1 − captured share); beside it the error measured. The plan's error bound "
        "(`error_bound`: Σ |a|·‖Δ‖ over skipped chunks, exact arithmetic) and its allowance for rounding both "
        "results to bf16 (`rounding_allowance`) are shown divided by ‖M_full − base‖, with whether the measured "
        "‖M − M_full‖ stays within the bound alone and within bound + allowance (what mgit's tests check). "
        "The analyze step computes ‖Δ‖ for chunk pairs the commits' statistics lack (here the experts were "
        "committed on the base, so none are expected); its reads are not part of the merge's.",
        "",
        plans_table(results, c.denominators),
        "",
        f"Commands, e.g. at K = {count}"
        + (" and a 10% budget" if 10 in c.budgets else "")
        + " (mergekit's YAML names the model directories, gives "
        f"each expert `parameters: {{weight: 1/K}}`, `parameters: {{lambda: {LAMBDA:g}}}` and `dtype: bfloat16`; "
        "paths relative to the repository root):",
        "",
        "```",
        *c.example_cmds,
        "```",
        "",
        "How it was measured: every merge is a separate process timed by wall clock, after untimed waits until "
        "no other benchmark of this repository runs and under "
        f"{IDLE_BELOW:.0%} of the CPUs are busy, and an untimed `sync`. mergekit reads the base and K experts in "
        "full (their safetensors files' size is its bytes read) and writes its output directory; `mgit merge` "
        "reads the base's chunks once and, per expert, the differing chunks its plan chose (its merge record's "
        "measured stored bytes), writes the merged tensors into its store, commits (parents base + K experts, "
        "plan recorded) on a new branch and checks it out, i.e. also writes the merged model into the working "
        "tree (it starts from a checkout of `main`). "
        + (
            f"Each merge ran {c.reps} times; the time column shows every run, the other columns the fastest. "
            if c.reps > 1
            else "Each merge ran once. "
        )
        + "The page cache cannot be dropped, so both tools read files written minutes before (warm). Peak RSS "
        f"as the kernel reports it (about {c.rss_floor / MB:.0f} MB of it inherited at fork), in parentheses "
        "the sampled peak of its anonymous part. Relative error: every result loaded (mgit: "
        "`Repository.state_dict(branch)`; mergekit: its safetensors files), and ‖M − M_full‖ / ‖M_full − base‖ "
        "computed in float64 over all tensors, M_full being mgit's exact merge; bit-equal compares every "
        "tensor's bytes with M_full's. Other load is the share of all CPUs that other processes used during "
        "the run. Targets are reported, not asserted.",
    ]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------


def int_list(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.replace("%", "").split(",") if x.strip())


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__)
    cli.add_common(
        p,
        workdir="bench-work/budget",
        size_gb=DEFAULT_SIZE_GB,
        quick=f"a ~{QUICK_SIZE_GB} GB model and K = 2, 4",
        reps=(1, "runs of every merge; the fastest is reported"),
        other_wait=3600,
        keep="keep the mgit repository afterwards",
        write_docs="replace this benchmark's section in benchmarks/results/bench_budget.md and write "
        f"{DOCS_IMAGE.relative_to(REPO_ROOT)}",
    )
    p.add_argument("--ks", type=int_list, help="expert counts, e.g. 2,4,8,16")
    p.add_argument(
        "--budgets", type=int_list, default=BUDGETS, help="budgets in percent, e.g. 100,50,25,10 ('' for none)"
    )
    cli.add_mergekit_venv(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    command = cli.command_line(argv, __file__)
    workdir = args.workdir.resolve()
    ks: tuple[int, ...] = args.ks or (QUICK_KS if args.quick else KS)
    size_gb = QUICK_SIZE_GB if args.quick else args.size_gb
    cli.check_free_disk(workdir, int(size_gb * GB * (2 * max(ks) + 4)))  # base, experts, their commits, outputs
    lock_workdir(workdir, "bench_budget.py")
    budgets: tuple[int, ...] = tuple(sorted(set(args.budgets), reverse=True))
    if any(not 0 < b <= 100 for b in budgets):
        raise SystemExit("budgets are percentages in (0, 100]")

    def check_mgit(mgit: list[str], where: str) -> None:
        if budgets and not has_budget(mgit):
            raise SystemExit(f"the mgit under test ({where}) has no `merge --budget-select`; pass --budgets '' "
                             "to run only the exact merges, or another --mgit-rev")  # fmt: skip

    s = merges.prepare(args, workdir, size_gb, max(ks), check_mgit)
    results: list[Measured] = []
    denominators: dict[int, float] = {}
    for k in ks:
        found, denominators[k] = bench_k(s, k, budgets)
        results += found
    kmax = max(ks)
    example_run = Run(kmax, "mgit", 10, "importance") if 10 in budgets else Run(kmax, "mgit")
    example = [
        relative(
            shlex.join(mergekit_cmd(s.mergekit, s.scratch / f"mergekit-{kmax}.yml", s.scratch / f"mergekit-{kmax}"))
        ),
        relative(shlex.join(mgit_merge_cmd([*s.mgit, "-C", str(s.repo)], example_run))),
    ]
    rss_floor = s.runner.rss_floor(workdir)
    raw = model_bytes(s.base, s.sums)
    wall = time.perf_counter() - started - s.runner.waited
    image = workdir / DOCS_IMAGE.name
    ctx = Context(command, s.versions, s.plan, raw, ks, budgets, workdir, args.reps, example, rss_floor, wall,
                  s.runner.waited, denominators, os.path.relpath(DOCS_IMAGE, DOCS_IMAGE.parent.parent))  # fmt: skip
    section = report(results, ctx)
    plot(results, ks, budgets, image)
    publish(section, SECTION_TITLE, args.write_docs)
    print(f"plot: {image}")
    if args.write_docs:
        DOCS_IMAGE.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(image, DOCS_IMAGE)
        print(f"updated {DOCS_IMAGE.relative_to(REPO_ROOT)}")
    if not args.keep:
        shutil.rmtree(s.scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
