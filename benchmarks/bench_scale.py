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
from pathlib import Path
from typing import Any

from harness import cli, merges, sameness, scale_disk
from harness.contenders import contenders
from harness.context import RunContext
from harness.machine import can_drop_caches, lock_workdir
from harness.merges import Merged, Setup
from harness.models import NAMED_SHAPES, ModelPlan, ensure_model, plan_layers
from harness.plot import save
from harness.report import REPO_ROOT, fmt_gb, fmt_rss, relative, took, update_results
from harness.runner import Result, Runner, copy_repository, time_cp
from harness.sameness import same_cell
from harness.scale_merges import BUDGET_METHOD, METHODS, NC_REPO, MergeRun, measure, repo_of
from harness.scale_report import (
    DOCS_IMAGE,
    MERGE_TITLE,
    STORE_TITLE,
    Part,
    ScaleRun,
    docs_image,
    merge_section,
    merge_title,
    plot,
    plot_title,
    store_section,
)
from harness.stores import store_versions_and_checkout
from harness.tools import find_tools, tool_env
from harness.variants import Version, ensure_variant

SHAPE, LAYERS, QUICK_LAYERS = "tinyllama", 22, 3
KS, QUICK_KS = (8, 16), (4,)
BUDGETS = (25, 10, 5)  # percent of the expert bytes the exact merge reads
PARTS = ("store", "merge")


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


# -- storage: add + commit and checkout -----------------------------------------------------


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
    for c in contenders(tools, message="v", timed_track=False, git_add="-A"):
        print(f"storage: {c.name} ...", flush=True)
        results += store_versions_and_checkout(c, base, dense, runs / c.name.replace(" ", ""), runner, args.reps)
        print("  " + ", ".join(f"{r.step} {r.best.seconds:.1f} s" for r in results[-3:]), flush=True)
    print("storage: cp -r ...", flush=True)
    results.append(time_cp(dense.model, runs / "cp", runner, dense.sums, args.reps))
    shutil.rmtree(runs, ignore_errors=True)
    part.run.versions = tools.versions
    part.run.took = took(time.perf_counter() - started - runner.waited, runner.waited)
    missing = (("git-lfs", tools.git_lfs), ("dvc", tools.dvc))
    part.skipped += [f"{n} (not installed)" for n, ok in missing if not ok and not (n == "dvc" and args.no_dvc)]
    if args.no_dvc:
        part.skipped.append("dvc (--no-dvc)")
    return results, base.raw


# -- merges ---------------------------------------------------------------------------------


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
    part.run.versions = s.versions
    if no_checkout:
        print("copying the repository for the --no-checkout merges (untimed; its packs hard-linked) ...", flush=True)
        copy_repository(s.repo, s.scratch / NC_REPO)
    if args.no_mergekit:
        part.skipped.append("mergekit (--no-mergekit)")
    merged = [m for k in ks for m in bench_merges(s, k, budgets, no_checkout, args.methods)]
    kmax = max(ks)
    shown = BUDGET_METHOD if BUDGET_METHOD in args.methods else args.methods[0]  # the example's method
    budget = 10 if 10 in budgets and shown == BUDGET_METHOD else None
    run = MergeRun(kmax, shown, "mgit", budget, not no_checkout)
    mergekit = (f"mergekit-{shown}-{kmax}.yml", f"mergekit-{shown}-{kmax}")
    example = merges.example_cmds(s, mergekit, run.mgit_cmd([*s.mgit, "-C", str(repo_of(s, run))]))
    if not args.keep:
        shutil.rmtree(s.scratch, ignore_errors=True)
    part.run.took = took(time.perf_counter() - started - s.runner.waited, s.runner.waited)
    return merged, example


# -- main -----------------------------------------------------------------------------------


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
    store, merge = (Part(RunContext(command, workdir, reps=args.reps)) for _ in PARTS)
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
    image_name = os.path.relpath(docs_svg, docs_svg.parent)
    ctx = ScaleRun(args.quick, plan, raw, ks, budgets, cold, args.warm, example, image_name, tuple(args.methods))
    sections = []  # (title, text, after): one per part run; a part not run keeps its section in the docs
    plotted = bool(merged) and BUDGET_METHOD in args.methods  # the plot shows the budgeted method only
    if merged:
        sections.append((merge_title(args.methods), merge_section(merged, ctx, merge), MERGE_TITLE))
    if plotted:
        save(plot(merged, ks, budgets, plot_title(ctx)), image)
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
