"""bench_scale's report: its two sections (storage, merges) as Markdown, their tables, targets and
how-measured text, and the chart of wall time against the budget.

Why: the script is the scenario (what runs, in what order, what it publishes); everything that turns
its results into text lives here, so the sentences of the report can be read (and changed) in one
place and tested with made-up results. One section per part, so a run of one part (``--parts store``)
replaces its own tables and keeps the other part's; a merge run of some of the methods has a section
(and a plot) of its own, placed after the full run's, which it leaves as it is.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from harness.context import RunContext
from harness.machine import IDLE_BELOW
from harness.merges import Merged, find
from harness.models import GB, MB, SEED, SHARDS, ModelPlan
from harness.plot import DASHED, PALETTE, SOLID, HLine, Series, line_chart
from harness.report import RESULTS_DIR, fmt_gb, fmt_rss, ratio, table
from harness.runner import Result
from harness.sameness import same_cell
from harness.scale_merges import BUDGET_METHOD, METHODS, MergeRun
from harness.stores import VERSION_STEPS
from harness.targets import Target, at_least, at_most, target, targets_table
from harness.variants import DENSE_NOISE, EXPERT_SEED, SCALE_DECADES

if TYPE_CHECKING:
    from matplotlib.figure import Figure

MERGE_TITLE = "## Merges at scale (bench_scale.py)"
STORE_TITLE = "## Storage at scale (bench_scale.py)"
DOCS_IMAGE = RESULTS_DIR / "bench_scale.svg"


@dataclass
class Part:
    """One part of a run as its section describes it: the run (versions, repetitions, what it took)
    and what it skipped."""

    run: RunContext
    skipped: list[str] = field(default_factory=list)


@dataclass
class ScaleRun:
    """What every section of a run says besides its numbers: the model, the Ks, budgets and methods,
    the page cache, the example commands and the plot."""

    quick: bool
    plan: ModelPlan
    raw: int
    ks: tuple[int, ...]
    budgets: tuple[int, ...]
    cold: bool
    warm: bool  # --warm: the page cache left as it is on purpose
    example_cmds: list[str]
    image: str  # the SVG, relative to benchmarks/results/
    methods: tuple[str, ...] = tuple(METHODS)  # the merge methods run


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
    for what in VERSION_STEPS:
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


def model_line(c: ScaleRun) -> str:
    s = c.plan.shape
    return (
        f"a generated llama-like bf16 base model of {c.raw / GB:.3f} GB ({c.plan.layers} layers, hidden "
        f"{s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, {len(c.plan.tensors)} tensors, weights "
        f"N(0, 0.02) from seed {SEED}, norms ones; sharded in up to {SHARDS} safetensors files with index and "
        "config)"
    )


def how_measured(c: ScaleRun, reps: int) -> str:
    return (
        "How it was measured: every step is a separate process timed by wall clock, after untimed waits until no "
        f"other benchmark of this repository runs and under {IDLE_BELOW:.0%} of the CPUs are busy, and an untimed "
        "`sync`"
        + (", then the page cache dropped" if c.cold else "")
        + ". "
        + (
            f"Each step ran {reps} times; the time columns show every run, the others the fastest. "
            if reps > 1
            else "Each step ran once. "
        )
        + "Peak RSS as the kernel reports it (`wait4`, the process and its children), in parentheses the sampled "
        "peak of its anonymous part. write_bytes counts pages dirtied for writing (also those deleted before "
        "writeback). Other load is the share of all CPUs that other processes used meanwhile."
    )


def section(
    title: str, c: ScaleRun, part: Part, inputs: str, body: list[str], targets: list[Target], after: Sequence[str] = ()
) -> str:
    """One part's docs section: its header, ``inputs`` and the page cache, ``body``, its targets, ``after``,
    how it was measured and what it skipped."""
    lines = [*part.run.header(title)]
    if c.quick:
        lines += ["**A `--quick` run** (a smoke test at a small size; the full run's numbers replace it).", ""]
    lines += [f"Input: {model_line(c)} and {inputs}", "", f"Page cache: {cache_note(c.cold, c.warm)}", "", *body]
    lines += ["Targets (what mgit must reach at this size; reported, not asserted):", "", targets_table(targets), ""]
    lines += [*after, how_measured(c, part.run.reps)]
    if part.skipped:
        lines += ["", "Skipped: " + "; ".join(part.skipped) + "."]
    return "\n".join(lines) + "\n"


def store_section(stored: Sequence[Result], c: ScaleRun, part: Part) -> str:
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


def merge_section(merged: Sequence[Merged[MergeRun]], c: ScaleRun, part: Part) -> str:
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


def plot_title(c: ScaleRun) -> str:
    """The chart's title: the budgeted method and the base's size."""
    kind = " (--quick)" if c.quick else ""
    return f"{BUDGET_METHOD}, {c.plan.nbytes / GB:.2f} GB bf16 base{kind}: wall time against the read budget"
