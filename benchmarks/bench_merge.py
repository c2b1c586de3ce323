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
4. for task_arithmetic and ties (density 0.5), weights 1/K, K = 2, 4, 8: time
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

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from harness import cli, merges
from harness.machine import lock_workdir
from harness.merges import Merged, Setup
from harness.models import GB, MB, SHARDS, ModelPlan, model_bytes, safetensors_bytes, split_shards
from harness.report import fmt_rss, fmt_times, header_lines, publish, table, took
from harness.sameness import Sameness, compare_tensors, last_json, safetensors_dir, same_cell
from harness.targets import Target, at_least, at_most, target, targets_table
from harness.tools import script_child
from harness.variants import EXPERT_SEED, SCALE_DECADES, frozen_byte_share

if TYPE_CHECKING:
    from mgit import Repository

SECTION_TITLE = "## Merge (bench_merge.py)"
METHODS: dict[str, dict[str, float]] = {"task_arithmetic": {}, "ties": {"density": 0.5}}
KS, QUICK_KS = (2, 4, 8), (2, 4)
DEFAULT_SIZE_GB, QUICK_SIZE_GB = 0.65, 0.1


@dataclass(frozen=True)
class Case:
    method: str
    k: int

    @property
    def label(self) -> str:
        return f"{self.method}-{self.k}"

    @property
    def branch(self) -> str:
        return f"merge-{self.label}-1"

    def mgit_cmd(self, mgit: list[str]) -> list[str]:
        return merges.mgit_merge_cmd(mgit, self.method, self.k, self.branch, METHODS[self.method])

    def mergekit_config(self, s: Setup) -> str:
        params = {"weight": 1 / self.k, **METHODS[self.method]}
        return merges.mergekit_config(self.method, s.base, s.experts[: self.k], params)


# -- the merges, and what mgit read -----------------------------------------------------------


def compare_main() -> None:
    """In a child (``python -c``): mgit's merged tensors at REV vs mergekit's output directory, and
    what the merge read of the experts; prints JSON."""
    from mgit import Repository

    repo_dir, rev, out_dir = sys.argv[1:4]
    with Repository(repo_dir) as repo:
        ours = repo.state_dict(rev)
        own, deltas = expert_chunks(repo, rev)
    doc = compare_tensors(ours, safetensors_dir(Path(out_dir)))
    print(json.dumps(doc | {"expert_own_bytes": own, "expert_delta_chunks": deltas}))


def expert_chunks(repo: Repository, rev: str) -> tuple[int, int]:
    """(stored bytes of the expert chunks the merge at ``rev`` read, without their delta bases; how many
    of them are stored as deltas): what the record's measured bytes would be if delta bases already in
    memory (the base's chunks) were not decoded again."""
    record = repo.merge_record(rev)
    assert record is not None, f"{rev} is not a merge"
    experts = [e["commit"] for e in record["experts"]]
    plan, _ = repo.merge_plan(experts, record["method"], record["base"], **record["parameters"])
    own = deltas = 0
    for tp in plan.tensors:
        for m, indexes in zip(tp.experts, tp.reads, strict=True):
            for i in indexes:
                loc = repo.store.locate(m.chunks[i].id)
                own += loc.length
                deltas += loc.base is not None
    return own, deltas


@dataclass
class Outcome:
    case: Case
    mergekit: Merged[Case]  # read: the safetensors files it must read, base + K experts
    mgit: Merged[Case]  # read: its merge record's measured bytes
    same: Sameness
    expert_own_bytes: int  # stored bytes of the expert chunks read, without their delta bases
    expert_delta_chunks: int  # of those chunks, how many are deltas (against the base's chunk)

    @property
    def speedup(self) -> float:
        return self.mergekit.proc.seconds / self.mgit.proc.seconds

    @property
    def rss_ratio(self) -> float:
        return self.mgit.proc.max_rss / self.mergekit.proc.max_rss

    @property
    def anon_ratio(self) -> float | None:
        mk, mg = (m.proc.peaks.get("RssAnon") for m in (self.mergekit, self.mgit))
        return mg / mk if mk and mg else None


def bench_case(s: Setup, case: Case) -> Outcome:
    print(f"{case.method}, K = {case.k}: mergekit ...", flush=True)
    mk, mk_times, out = merges.run_mergekit(s, f"mergekit-{case.label}", case.mergekit_config(s), f"{case.label}.yml")
    print(f"  {mk.seconds:.1f} s, {fmt_rss(mk)} MB; mgit ...", flush=True)
    mg, mg_times, record = merges.run_mgit(s, case.mgit_cmd(s.mgit), case.branch)
    print(f"  {mg.seconds:.1f} s, {fmt_rss(mg)} MB; comparing the outputs ...", flush=True)
    code = "from bench_merge import compare_main; compare_main()"
    doc = last_json(s.runner.run(script_child(s.mgit, code, str(s.repo), case.branch, str(out)), s.repo).output)
    own, deltas = doc.pop("expert_own_bytes"), doc.pop("expert_delta_chunks")
    same = Sameness(**doc)
    print(f"  bit-identical tensors {same.identical}/{same.tensors}, max |Δ| {same.max_abs:g}", flush=True)
    shutil.rmtree(out, ignore_errors=True)
    b = record["bytes"]
    mergekit = Merged(case, mk, mk_times, safetensors_bytes([s.base, *s.experts[: case.k]]))
    mgit = Merged(case, mg, mg_times, b["base_measured"] + b["experts_measured"], record)
    return Outcome(case, mergekit, mgit, same, own, deltas)


# -- reporting ----------------------------------------------------------------------------


def results_table(outcomes: list[Outcome]) -> str:
    header = [
        "method",
        "K",
        "mergekit time (s)",
        "mgit time (s)",
        "speedup (×)",
        "mergekit peak RSS (MB)",
        "mgit peak RSS (MB)",
        "RSS mgit / mergekit",
        "mergekit reads (GB)",
        "mgit reads (GB)",
        "outputs equal",
        "other load (mergekit / mgit)",
    ]
    rows = []
    for o in outcomes:
        ratio = o.anon_ratio
        rows.append(
            [
                o.case.method,
                str(o.case.k),
                fmt_times(o.mergekit.times),
                fmt_times(o.mgit.times),
                f"{o.speedup:.2f}",
                fmt_rss(o.mergekit.proc),
                fmt_rss(o.mgit.proc),
                f"{o.rss_ratio:.2f}" + (f" ({ratio:.2f})" if ratio else ""),
                f"{o.mergekit.read / GB:.3f}",
                f"{o.mgit.read / GB:.3f}",
                same_cell(o.same, max_abs=True),
                f"{o.mergekit.proc.load_share:.0%} / {o.mgit.proc.load_share:.0%}",
            ]
        )
    return table(header, "lrrrrrrrrrll", rows)


def reads_table(outcomes: list[Outcome]) -> str:
    header = [
        "method",
        "K",
        "mgit: base chunks (GB)",
        "mgit: expert chunks (GB)",
        "expert chunks read",
        "of which deltas",
        "their own stored bytes (GB)",
        "expert bytes planned (GB)",
        "mergekit: base + K experts (GB)",
    ]
    rows = []
    for o in outcomes:
        b = o.mgit.record["bytes"]
        rows.append(
            [
                o.case.method,
                str(o.case.k),
                f"{b['base_measured'] / GB:.3f}",
                f"{b['experts_measured'] / GB:.3f}",
                str(b["expert_chunks_measured"]),
                str(o.expert_delta_chunks),
                f"{o.expert_own_bytes / GB:.3f}",
                f"{b['experts_estimated'] / GB:.3f}",
                f"{o.mergekit.read / GB:.3f}",
            ]
        )
    return table(header, "lrrrrrrrr", rows)


def targets(outcomes: list[Outcome]) -> list[Target]:
    """The targets at the largest K, plus the anonymous-memory ratio for information."""
    found = []
    kmax = max(o.case.k for o in outcomes)
    for o in (o for o in outcomes if o.case.k == kmax):
        at = (o.case.method, str(kmax))
        found += [
            target("mgit speedup over mergekit (×)", o.speedup, "≥ 2", at_least(2), context=at),
            target("mgit peak RSS / mergekit's", o.rss_ratio, "≤ 0.5", at_most(0.5), context=at),
        ]
        if (anon := o.anon_ratio) is not None:
            metric = "(for information) the same, anonymous memory only"
            found.append(target(metric, anon, "(≤ 0.5)", at_most(0.5), context=at))
        same = o.same.bit_identical
        found.append(Target("outputs bit-identical", "yes" if same else "no", "yes", same, at))
    return found


@dataclass
class Context:
    command: str
    versions: dict[str, str]
    plan: ModelPlan
    raw: int
    experts: int
    workdir: Path
    reps: int
    example: Case
    example_cmds: list[str]
    rss_floor: int
    wall: float  # seconds the whole run took, waits for other benchmarks excluded
    waited: float  # seconds spent waiting for other benchmarks


def report(outcomes: list[Outcome], c: Context) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    shares = [frozen_byte_share(c.plan, k) for k in range(1, c.experts + 1)]
    lines = [
        *header_lines(SECTION_TITLE, c.command, c.workdir, c.versions, took(c.wall, c.waited)),
        f"Input: {merges.base_words(c.plan, c.raw)}{len(split_shards(c.plan.tensors, SHARDS))} safetensors shards, "
        "index and a `LlamaForCausalLM` config.json) and "
        f"{c.experts} experts made from it like fine-tunes: each leaves a random third of the tensors byte for byte "
        f"as the base's ({min(shares):.0%}–{max(shares):.0%} of the bytes, as the tensors drawn differ in size) and "
        "adds Gaussian noise to every other tensor, at a scale drawn log-uniformly per tensor from "
        f"1e{SCALE_DECADES[0]:.0f} to 1e{SCALE_DECADES[1]:.0f} of the tensor's std (of its RMS for the norms, "
        "whose std is 0), then rounds to bf16 (seeds "
        f"{EXPERT_SEED + 1}…{EXPERT_SEED + c.experts}). mergekit reads the model directories; mgit has the base on "
        "`main` and expert N on branch `expert-N` of one repository. Merges use the first K experts, weights "
        "1/K, ties with density 0.5, everything else the methods' defaults, bf16 throughout.",
        "",
        results_table(outcomes),
        "",
        targets_table(targets(outcomes), ["method", "K"], "lr"),
        "",
        "What each read: mergekit memory-maps and reads the base and every expert in full (the safetensors "
        "files' size); mgit's numbers are its merge record's measured stored (compressed) bytes "
        "(`mgit show --json`, `plan.bytes`): the base's chunks once, and per expert only the chunks whose id "
        "differs from the base's — twice for ties, which decides on each expert's whole delta before merging "
        "chunk by chunk (`plan.bytes.expert_passes` = 2; the experts' own stored bytes are counted once). "
        "`mgit commit` stores most chunks of a fine-tune as deltas against the "
        "base's chunk at the same place, which decoding needs: the experts' own stored bytes (from the chunk "
        "store's index) are the least their reads can cost; measured bytes above them mean delta bases were "
        "read again. Planned: the plan's estimate (`experts_estimated`).",
        "",
        reads_table(outcomes),
        "",
        f"Commands, e.g. for {c.example.method} at K = {c.example.k} (mergekit's YAML names the model "
        "directories and gives each expert `parameters: {weight: 1/K}` (ties: and `density: 0.5`) and "
        "`dtype: bfloat16`; paths relative to the repository root):",
        "",
        "```",
        *c.example_cmds,
        "```",
        "",
        merges.waits_words("merge") + ". mergekit writes its output directory "
        "(deleted before each run); `mgit merge` writes the merged tensors into its store, commits (parents base + "
        "K experts, plan recorded) on a new branch and checks it out, i.e. also writes the merged model into the "
        "working tree (it starts from a checkout of `main`). "
        + (
            f"Each merge ran {c.reps} times; the time columns show every run, the other columns the fastest. "
            if c.reps > 1
            else "Each merge ran once. "
        )
        + "The page cache cannot be dropped, so both tools read files written minutes before (warm, as far as "
        "RAM holds them). Peak RSS is the largest resident set of the process as the kernel reports "
        f"it; it includes about {c.rss_floor / MB:.0f} MB inherited at fork (what `true` reports) and the "
        "touched pages of memory-mapped files (mergekit maps the input safetensors files, mgit its pack files). "
        "In parentheses: the peak of the anonymous part alone (RssAnon, sampled from /proc every 0.1 s), i.e. "
        "memory the process allocated, without mapped files; the ratio in parentheses compares those. "
        "Outputs equal: mgit's merged tensors, loaded with `Repository.state_dict(branch)`, against the tensors "
        "of mergekit's output directory, per tensor, compared bit for bit (as int16) and by the largest absolute "
        "difference in float32. Other load is the share of all CPUs that other processes used during the run. "
        "Targets are reported, not asserted.",
    ]
    return "\n".join(lines) + "\n"


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
    methods = cli.names_list(tuple(METHODS), "method")
    p.add_argument("--methods", type=methods, default=tuple(METHODS), help="comma-separated, of: " + ", ".join(METHODS))
    cli.add_mergekit_venv(p)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    command = cli.command_line(argv, __file__)
    workdir = args.workdir.resolve()
    ks = args.ks or (QUICK_KS if args.quick else KS)
    size_gb = QUICK_SIZE_GB if args.quick else args.size_gb
    cli.check_free_disk(workdir, int(size_gb * GB * (2 * max(ks) + 4)))  # base, experts, their commits, outputs
    lock_workdir(workdir, "bench_merge.py")
    s = merges.prepare(args, workdir, size_gb, max(ks))
    cases = [Case(m, k) for m in args.methods for k in ks]
    outcomes = [bench_case(s, case) for case in cases]
    last = cases[-1]
    example = merges.example_cmds(
        s, (f"{last.label}.yml", f"mergekit-{last.label}"), last.mgit_cmd([*s.mgit, "-C", str(s.repo)])
    )
    rss_floor = s.runner.rss_floor(workdir)
    wall = time.perf_counter() - started - s.runner.waited
    raw = model_bytes(s.base, s.sums)
    ctx = Context(
        command, s.versions, s.plan, raw, max(ks), workdir, args.reps, last, example, rss_floor, wall, s.runner.waited
    )
    publish(report(outcomes, ctx), SECTION_TITLE, args.write_docs)
    if not args.keep:
        shutil.rmtree(s.scratch, ignore_errors=True)
    return 0 if all(o.same.bit_identical for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
