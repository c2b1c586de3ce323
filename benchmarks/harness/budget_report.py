"""bench_budget's report: its section as Markdown (the runs, the plans, the targets and how it was
measured) and the chart of relative error and wall time against the budget.

Why: the script is the scenario (which merges run, in what order, compared with what); everything
that turns its results into text and a chart lives here, so the report's sentences can be read (and
changed) in one place and tested with made-up results.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import merges
from harness.budget_merges import LAMBDA, METHOD, SELECT_SEED, Run
from harness.context import RunContext
from harness.merges import Merged, find
from harness.models import GB, MB, SHARDS, ModelPlan, split_shards
from harness.plot import DOTTED, NO_LINE, PALETTE, HLine, Panel, Series, figure, save
from harness.report import RESULTS_DIR, fmt_rss, fmt_times, table
from harness.targets import Target, at_least, at_most, target, targets_table
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
TARGET_K, TARGET_BUDGET, TARGET_SPEEDUP, TARGET_ERROR_RATIO = 16, 10, 5.0, 0.5


def fmt_err(e: float | None) -> str:
    if e is None or math.isnan(e):
        return "?"
    return "0" if e == 0 else f"{e:.3g}"


def equal_cell(m: Merged[Run]) -> str:
    c = m.same
    if c is None:
        return "?"
    if m.run.tool == "mgit" and m.run.budget is None:
        return "(reference)"
    if c.bit_identical:
        return "yes"
    missing = f", {len(c.problems)} missing/mismatched" if c.problems else ""
    return f"no ({c.identical}/{c.tensors} tensors equal{missing})"


def results_table(results: list[Merged[Run]]) -> str:
    header = [
        "K",
        "run",
        "budget",
        "expert bytes read (GB)",
        "total bytes read (GB)",
        "wall time (s)",
        "speedup over mergekit (×)",
        "peak RSS (MB)",
        "relative error",
        "bit-equal to exact",
        "other load",
    ]
    rows = []
    for m in results:
        mk = find(results, Run(m.run.k, "mergekit"))
        rows.append(
            [
                str(m.run.k),
                m.run.label,
                m.run.budget_cell,
                f"{m.expert_read / GB:.3f}",
                f"{m.read / GB:.3f}",
                fmt_times(m.times),
                f"{mk.proc.seconds / m.proc.seconds:.2f}" if mk and m.run.tool == "mgit" else "",
                fmt_rss(m.proc),
                fmt_err(m.rel_error),
                equal_cell(m),
                f"{m.proc.load_share:.0%}",
            ]
        )
    return table(header, "rlrrrrrrrlr", rows)


def plans_table(results: list[Merged[Run]], denominators: dict[int, float]) -> str:
    """What each budgeted plan promised (its record's `budget`) beside what the run read and missed."""
    header = [
        "K",
        "select",
        "budget",
        "limit (GB)",
        "planned (GB)",
        "read (GB)",
        "within limit",
        "chunks read / candidates",
        "captured share",
        "most possible",
        "√(1 − captured)",
        "relative error",
        "error bound (relative)",
        "≤ bound",
        "rounding allowance (relative)",
        "≤ bound + allowance",
        "analyze step (pairs / GB)",
    ]
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
        rows.append(
            [
                str(m.run.k),
                str(b.get("select", m.run.select)),
                m.run.budget_cell,
                f"{b['limit_bytes'] / GB:.3f}",
                f"{b['expert_bytes_planned'] / GB:.3f}",
                f"{m.expert_read / GB:.3f}",
                "yes" if m.expert_read <= b["limit_bytes"] else "**no**",
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
            ]
        )
    return table(header, "rlrrrrlrrrrrrlrlr", rows)


def error_ratio(results: list[Merged[Run]], k: int, budget: int) -> float | None:
    imp, uni = find(results, Run(k, "mgit", budget, "importance")), find(results, Run(k, "mgit", budget, "uniform"))
    if not imp or not uni or imp.rel_error is None or not uni.rel_error:
        return None
    return imp.rel_error / uni.rel_error


def best_ratio(results: list[Merged[Run]], k: int, budget: int) -> float | None:
    """√(1 − the most any plan can capture at this budget) over the uniform pick's error: what no
    choice of chunks can beat (the error tracks √(1 − captured share), see the plans table)."""
    imp, uni = find(results, Run(k, "mgit", budget, "importance")), find(results, Run(k, "mgit", budget, "uniform"))
    if not imp or not uni or not uni.rel_error or "captured_share_max" not in imp.record.get("budget", {}):
        return None
    return math.sqrt(max(0.0, 1 - imp.record["budget"]["captured_share_max"])) / uni.rel_error


def targets(results: list[Merged[Run]], ks: Sequence[int], budgets: Sequence[int]) -> list[Target]:
    found = []
    k = TARGET_K if TARGET_K in ks else max(ks)
    note = "" if k == TARGET_K else f" (K = {TARGET_K} not run)"
    mk, cheap = find(results, Run(k, "mergekit")), find(results, Run(k, "mgit", TARGET_BUDGET, "importance"))
    if mk and cheap:
        metric = f"K = {k}{note}, budget {TARGET_BUDGET}%: mgit faster than mergekit, end to end (×)"
        speedup = mk.proc.seconds / cheap.proc.seconds
        found.append(target(metric, speedup, f"≥ {TARGET_SPEEDUP:g}", at_least(TARGET_SPEEDUP)))
    for b in (b for b in budgets if b < 100):
        ratios = {kk: r for kk in ks if (r := error_ratio(results, kk, b)) is not None}
        if ratios:
            worst = max(ratios, key=lambda kk: ratios[kk])
            metric = f"budget {b}%: importance error / uniform error (worst K: {worst})"
            bound = f"≤ {TARGET_ERROR_RATIO:g}"
            found.append(target(metric, ratios[worst], bound, at_most(TARGET_ERROR_RATIO), "{:.3f}"))
            best = best_ratio(results, worst, b)
            if best is not None:
                metric = (
                    f"(for information) budget {b}%, K = {worst}: the lowest ratio any choice of chunks "
                    "within the budget can reach, √(1 − captured_share_max) / uniform error"
                )
                found.append(Target(metric, f"{best:.3f}", "", None))
    if 100 in budgets:
        full = {kk: find(results, Run(kk, "mgit", 100, "importance")) for kk in ks}
        found.append(every_k("budget 100%: bit-equal to the exact merge", full, "yes"))
    mks = {kk: find(results, Run(kk, "mergekit")) for kk in ks}
    found.append(every_k("(for information) mgit exact bit-equal to mergekit", mks, "(yes)"))
    return found


def every_k(metric: str, runs: dict[int, Merged[Run] | None], want: str) -> Target:
    """Whether the run at every K equals the exact merge bit for bit."""
    bad = [k for k, m in runs.items() if not (m and m.same and m.same.bit_identical)]
    return Target(metric, "yes, every K" if not bad else "no at K = " + ", ".join(map(str, bad)), want, not bad)


def plot(results: list[Merged[Run]], ks: Sequence[int], budgets: Sequence[int], path: Path) -> None:
    """Relative error (importance vs uniform) and wall time (mergekit a line) against the budget, per K."""
    styles = {"importance": ("-", "o"), "uniform": ("--", "x")}
    errors, times, hlines = [], [], []
    for i, k in enumerate(ks):
        color = PALETTE[i]
        for select, (ls, marker) in styles.items():
            runs = sorted(
                (m for m in results if m.run.k == k and m.run.select == select), key=lambda m: m.run.budget or 0
            )
            errs = [(m.run.budget, m.rel_error) for m in runs if (m.run.budget or 100) < 100 and m.rel_error]
            errors.append(Series("", errs, color, ls, marker))
            times.append(Series("", [(m.run.budget, m.proc.seconds) for m in runs], color, ls, marker))
        if mk := find(results, Run(k, "mergekit")):
            hlines.append(HLine("", mk.proc.seconds, color))
        if exact := find(results, Run(k, "mgit")):
            times.append(Series("", [(100, exact.proc.seconds)], color, NO_LINE, "*", 10))
    shown = sorted(budgets)
    by_k = [Series(f"K = {k}", [], PALETTE[i], marker="") for i, k in enumerate(ks)]
    by_select = [Series(s, [], "grey", ls, mk) for s, (ls, mk) in styles.items()]
    tools = [Series("mgit exact", [], "grey", NO_LINE, "*", 10), HLine("mergekit (full read)", 0, "grey", DOTTED)]
    x_label = "budget (share of the expert bytes the exact merge reads)"
    err_ticks = [(b, f"{b}%") for b in shown if b < 100]
    error_title = "relative error ‖M − M_full‖ / ‖M_full − base‖"
    panels = [
        Panel(
            [e for e in errors if e.points],
            err_ticks,
            (),
            error_title,
            x_label,
            log_x=True,
            log_y=True,
            legend=by_k + by_select,
        ),
        Panel(
            [t for t in times if t.points],
            [(b, f"{b}%") for b in shown],
            hlines,
            "wall time (s)",
            x_label,
            log_x=True,
            legend=by_k + by_select + tools,
            legend_cols=2,
        ),
    ]
    title = f"{METHOD} of K experts under a read budget (100%: bit-equal to the exact merge)"
    save(figure(panels, title=title, size=(11.5, 4.4)), path)


@dataclass
class BudgetRun:
    """What the section says of the run besides its results and the RunContext's lines."""

    plan: ModelPlan
    raw: int
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    example_cmds: list[str]
    denominators: dict[int, float]  # K → ‖M_full − base‖
    image: str  # the PNG, relative to benchmarks/results/


def report(results: list[Merged[Run]], run: RunContext, c: BudgetRun) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    count = max(c.ks)
    shares = [frozen_byte_share(c.plan, k) for k in range(1, count + 1)]
    lines = [
        *run.header(SECTION_TITLE),
        f"Input: {merges.base_words(c.plan, c.raw)}{len(split_shards(c.plan.tensors, SHARDS))} safetensors shards, "
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
        targets_table(targets(results, c.ks, c.budgets)),
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
        merges.waits_words("merge") + ". mergekit reads the base and K experts in "
        "full (their safetensors files' size is its bytes read) and writes its output directory; `mgit merge` "
        "reads the base's chunks once and, per expert, the differing chunks its plan chose (its merge record's "
        "measured stored bytes), writes the merged tensors into its store, commits (parents base + K experts, "
        "plan recorded) on a new branch and checks it out, i.e. also writes the merged model into the working "
        "tree (it starts from a checkout of `main`). "
        + (
            f"Each merge ran {run.reps} times; the time column shows every run, the other columns the fastest. "
            if run.reps > 1
            else "Each merge ran once. "
        )
        + "The page cache cannot be dropped, so both tools read files written minutes before (warm). Peak RSS "
        f"as the kernel reports it (about {run.rss_floor / MB:.0f} MB of it inherited at fork), in parentheses "
        "the sampled peak of its anonymous part. Relative error: every result loaded (mgit: "
        "`Repository.state_dict(branch)`; mergekit: its safetensors files), and ‖M − M_full‖ / ‖M_full − base‖ "
        "computed in float64 over all tensors, M_full being mgit's exact merge; bit-equal compares every "
        "tensor's bytes with M_full's. Other load is the share of all CPUs that other processes used during "
        "the run. Targets are reported, not asserted.",
    ]
    return "\n".join(lines) + "\n"
