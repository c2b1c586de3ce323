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

import os
import shutil
import sys
import time
from collections.abc import Sequence

from harness import cli, merges
from harness.budget_merges import Run, measure
from harness.budget_report import DOCS_IMAGE, SECTION_TITLE, BudgetRun, fmt_err, plot, report
from harness.context import RunContext
from harness.machine import lock_workdir
from harness.merges import Merged, Setup
from harness.models import GB, model_bytes
from harness.report import REPO_ROOT, fmt_rss, publish, took
from harness.sameness import Sameness, relative_errors

KS, QUICK_KS = (2, 4, 8, 16), (2, 4)
BUDGETS = (100, 50, 25, 10)  # percent of the expert bytes the exact merge reads
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 0.25, 0.1


# -- the runs -----------------------------------------------------------------------------


def runs_for(k: int, budgets: Sequence[int]) -> list[Run]:
    """mergekit, mgit exact, then per budget (largest first) the importance plan and the uniform pick."""
    runs = [Run(k, "mergekit"), Run(k, "mgit")]
    for b in budgets:
        runs.append(Run(k, "mgit", b, "importance"))
        if b < 100:  # at 100% every chunk is read, however they are picked
            runs.append(Run(k, "mgit", b, "uniform"))
    return runs


def bench_k(s: Setup, k: int, budgets: Sequence[int]) -> tuple[list[Merged[Run]], float]:
    """Every run for experts 1..k, compared with the exact merge; and ‖M_full − base‖."""
    found: list[Merged[Run]] = []
    out = None
    for run in runs_for(k, budgets):
        print(f"K = {k}, {run.label}" + (f" at {run.budget}%" if run.budget else "") + " ...", flush=True)
        m, made = measure(s, run)
        out = made or out
        print(f"  {m.proc.seconds:.1f} s, {fmt_rss(m.proc)} MB, read {m.read / GB:.3f} GB", flush=True)
        found.append(m)
    print(f"K = {k}: comparing every result with the exact merge ...", flush=True)
    revs = [m.run.branch for m in found if m.run.tool == "mgit" and m.run.budget is not None]
    denom, same = relative_errors(s.runner, s.mgit, s.repo, Run(k, "mgit").branch, revs, out)
    tensors = same["mergekit"].tensors
    for m in found:
        if m.run.tool == "mergekit":
            m.same = same["mergekit"]
        elif m.run.budget is None:
            m.same = Sameness(tensors, tensors, rel_error=0.0)  # the reference itself
        else:
            m.same = same[m.run.branch]
        if m.run.budget is not None and m.run.budget < 100:
            print(f"  {m.run.label} {m.run.budget_cell}: relative error {fmt_err(m.rel_error)}", flush=True)
    if out is not None:
        shutil.rmtree(out, ignore_errors=True)
    return found, denom


# -- main ---------------------------------------------------------------------------------


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
    p.add_argument("--ks", type=cli.int_list, help="expert counts, e.g. 2,4,8,16")
    p.add_argument(
        "--budgets", type=cli.int_list, default=BUDGETS, help="budgets in percent, e.g. 100,50,25,10 ('' for none)"
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
        if budgets and not merges.merge_takes(mgit, "--budget-select"):
            raise SystemExit(
                f"the mgit under test ({where}) has no `merge --budget-select`; pass --budgets '' "
                "to run only the exact merges, or another --mgit-rev"
            )

    s = merges.prepare(args, workdir, size_gb, max(ks), check_mgit)
    results: list[Merged[Run]] = []
    denominators: dict[int, float] = {}
    for k in ks:
        found, denominators[k] = bench_k(s, k, budgets)
        results += found
    kmax = max(ks)
    shown = Run(kmax, "mgit", 10, "importance") if 10 in budgets else Run(kmax, "mgit")
    mergekit = (f"mergekit-{kmax}.yml", f"mergekit-{kmax}")
    example = merges.example_cmds(s, mergekit, shown.mgit_cmd([*s.mgit, "-C", str(s.repo)]))
    wall = time.perf_counter() - started - s.runner.waited
    image = workdir / DOCS_IMAGE.name
    run = RunContext(command, workdir, s.versions, args.reps, s.runner.rss_floor(workdir), took(wall, s.runner.waited))
    image_name = os.path.relpath(DOCS_IMAGE, DOCS_IMAGE.parent.parent)  # as benchmarks/results/ links it
    ctx = BudgetRun(s.plan, model_bytes(s.base, s.sums), ks, budgets, example, denominators, image_name)
    section = report(results, run, ctx)
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
