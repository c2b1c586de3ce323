"""Merge benchmark: `mgit merge` side by side with `mergekit-yaml`, same inputs, same outputs.

Why: mgit claims that a merge of K fine-tunes of one base costs what the fine-tunes changed,
not K + 1 whole models: the base's chunks are read once, an expert's chunks equal to the
base's are never read, tensors stream one name at a time, and the result is the same,
bit for bit, as mergekit's. mergekit (`mergekit-yaml`, the tool people use) reads every
expert in full. This script checks speed, memory and equality on one machine, in one run:

1. generate a llama-like bf16 base model (bench_core's generator, fixed seed, cached) and K
   experts from it, as fine-tunes touch models: a third of the tensors frozen (byte for
   byte the base's), every other tensor moved by Gaussian noise whose scale, relative to
   the tensor's std, is drawn log-uniformly per tensor over 1e-4 … 1e-1 (cached);
2. install mergekit from PyPI into its own virtual environment (created when missing);
3. commit the base on `main` and each expert on a branch `expert-N` of one fresh mgit
   repository (untimed);
4. for task_arithmetic and ties (density 0.5), weights 1/K, K = 2, 4, 8 (``--methods`` names
   others, ``--methods all`` every one in harness/merge_cases.py's METHODS, each with its
   parameters there; a method that takes one expert count runs at it alone): time
   `mergekit-yaml` on the model directories and `mgit merge` on the branches, each a
   separate process (wall time, peak RSS and the peak of its anonymous part), after an
   untimed wait for other benchmarks and an idle machine; count the bytes each must read;
5. load mergekit's output and mgit's merged tensors (`Repository.state_dict`) and compare
   them tensor by tensor: bit-identical, and the largest absolute difference;
6. print Markdown tables and, with ``--write-docs``, replace this benchmark's section of
   benchmarks/results/bench_merge.md (other sections are kept).

Targets (mgit ≥ 2× faster than mergekit at K = 8, peak RSS ≤ half of mergekit's) are
reported, never asserted. The page cache cannot be dropped: both tools read warm files.
GB = 10^9 bytes, MB = 10^6 bytes.
"""

import shutil
import sys
import time
from collections.abc import Sequence

from harness import cli, merges
from harness.context import RunContext
from harness.machine import lock_workdir
from harness.merge_cases import COMPARE_CODE, DEFAULT_METHODS, METHODS, Case, Outcome, cases
from harness.merge_report import SECTION_TITLE, MergeInputs, report
from harness.merges import Merged, Setup
from harness.models import GB, model_bytes, safetensors_bytes
from harness.report import fmt_rss, publish, took
from harness.sameness import Sameness, last_json
from harness.tools import script_child

KS, QUICK_KS = (2, 4, 8), (2, 4)
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 0.65, 0.1


def bench_case(s: Setup, case: Case) -> Outcome:
    print(f"{case.method}, K = {case.k}: mergekit ...", flush=True)
    config, name = case.mergekit_config(s), f"mergekit-{case.label}"
    mk, mk_times, out = merges.run_mergekit(s, name, config, f"{case.label}.yml", case.mergekit_flags)
    print(f"  {mk.seconds:.1f} s, {fmt_rss(mk)} MB; mgit ...", flush=True)
    mg, mg_times, record = merges.run_mgit(s, case.mgit_cmd(s.mgit), case.branch)
    print(f"  {mg.seconds:.1f} s, {fmt_rss(mg)} MB; comparing the outputs ...", flush=True)
    child = script_child(s.mgit, COMPARE_CODE, str(s.repo), case.branch, str(out))
    doc = last_json(s.runner.run(child, s.repo).output)
    own, deltas = doc.pop("expert_own_bytes"), doc.pop("expert_delta_chunks")
    same = Sameness(**doc)
    dtypes = ", ".join(same.dtypes)
    print(
        f"  bit-identical tensors {same.identical}/{same.tensors}, max |Δ| {same.max_abs:g}; mgit's {dtypes}",
        flush=True,
    )
    shutil.rmtree(out, ignore_errors=True)
    b = record["bytes"]
    mergekit = Merged(case, mk, mk_times, safetensors_bytes(case.inputs(s)))
    mgit = Merged(case, mg, mg_times, b["base_measured"] + b["experts_measured"], record)
    return Outcome(case, mergekit, mgit, same, own, deltas)


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__)
    cli.add_common(
        p,
        workdir="bench-work/merge",
        size_gb=DEFAULT_SIZE_GB,
        quick=f"a ~{QUICK_SIZE_GB} GB model and K = 2, 4",
        reps=(1, "runs of every merge per tool; the fastest is reported"),
        other_wait=3600,
        keep="keep the mgit repository afterwards",
    )
    p.add_argument("--ks", type=cli.int_list, help="expert counts, e.g. 2,4,8")
    methods = cli.names_list((*METHODS, "all"), "method")
    p.add_argument(
        "--methods",
        type=methods,
        default=DEFAULT_METHODS,
        help=f"comma-separated, of: {', '.join(METHODS)}; or all (default: {','.join(DEFAULT_METHODS)})",
    )
    cli.add_mergekit_venv(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    command = cli.command_line(argv, __file__)
    workdir = args.workdir.resolve()
    ks = args.ks or (QUICK_KS if args.quick else KS)
    run_cases = cases(tuple(METHODS) if "all" in args.methods else args.methods, ks)
    kmax = max(c.k for c in run_cases)
    size_gb = QUICK_SIZE_GB if args.quick else args.size_gb
    cli.check_free_disk(workdir, int(size_gb * GB * (2 * kmax + 4)))  # base, experts, their commits, outputs
    lock_workdir(workdir, "bench_merge.py")
    s = merges.prepare(args, workdir, size_gb, kmax)
    outcomes = [bench_case(s, case) for case in run_cases]
    last = run_cases[-1]
    mgit_cmd = last.mgit_cmd([*s.mgit, "-C", str(s.repo)])
    example = merges.example_cmds(s, (f"{last.label}.yml", f"mergekit-{last.label}"), mgit_cmd, last.mergekit_flags)
    rss_floor = s.runner.rss_floor(workdir)
    wall = time.perf_counter() - started - s.runner.waited
    run = RunContext(command, workdir, s.versions, args.reps, rss_floor, took(wall, s.runner.waited))
    ctx = MergeInputs(s.plan, model_bytes(s.base, s.sums), kmax, last, example)
    publish(report(outcomes, run, ctx), SECTION_TITLE, args.write_docs)
    if not args.keep:
        shutil.rmtree(s.scratch, ignore_errors=True)
    return 0 if all(o.same.bit_identical for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
