"""Diff benchmark: `mgit diff` side by side with loading both versions with safetensors + torch.

Why: `mgit diff` claims that comparing two committed versions of a model costs what changed,
not what the model weighs: `--stat` works from chunk ids alone (no tensor data read), and
the numeric diff (‖Δ‖, cosine, max|Δ|) reads only the chunk pairs whose ids differ, taking
the rest from norms the manifests recorded. The usual way, loading both versions'
safetensors files and computing the same numbers with torch, always reads everything. This
script checks the claims, and that the numbers agree, on one machine, in one run:

1. generate version A, a llama-like bf16 model (bench_core's generator, cached), and from it
   B, a dense fine-tune (every tensor + small noise, so every chunk changes), and B', whose
   last quarter of the layers is B's and everything else is byte for byte A's (cached);
2. commit A on `main`, B on branch `dense` and B' on branch `partial` of a fresh mgit
   repository (untimed);
3. count, untimed, the chunk reads each diff asks the store for (mgit's own read counters);
4. time `mgit diff main dense --stat`, `mgit diff main dense --json`, and the baseline script
   (both versions' shards with `safetensors.torch.load_file`, per tensor in float64), and the
   same for `partial`; every step ``--reps`` times, the fastest reported, all shown;
5. check per tensor that mgit's ‖Δ‖ and cosine are within 1e-6 (relative) of the baseline's;
6. print a Markdown table and, with ``--write-docs``, replace this benchmark's section of
   benchmarks/results/bench_diff.md (other sections are kept).

Timing follows the harness: every timed command is its own process, started after the
quiet-machine policy (no other benchmark, an untimed ``sync``, idle CPUs); the page cache
cannot be dropped, so everything reads warm files. GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import importlib.metadata
import json
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness import cli
from harness.context import RunContext
from harness.diff_inputs import NOISE, changed_bytes, changed_layers, ensure_versions
from harness.machine import IDLE_BELOW
from harness.models import GB, MB, SEED, SHARDS, ModelPlan, ensure_model
from harness.report import fmt_times, publish, table, yes_no
from harness.runner import Proc, Runner, best_of
from harness.tools import commit_branches, mgit_command, mgit_label, python_prefix, tool_env, version_of
from harness.torch_diff import QUANTITIES, TOLERANCE, Check, check, load_and_compare

SECTION_TITLE = "## Diff (bench_diff.py)"
CASES = (("dense", "B (dense: every tensor)"), ("partial", "B' (a quarter of the layers)"))


# Run with the mgit under test: which chunks `repo.diff` asks the store for, and what it decodes.
COUNT_READS = """
import json, sys
from mgit.repo import Repository
repo = Repository(sys.argv[1])
store, requests = repo.store, [0]
get = store.get
# get(cid, what, _depth, ...) before mgit named a chunk's owner by context, get(cid, ...) since: count top-level reads
def counted(cid, *args, **options):
    requests[0] += (args[1] if len(args) > 1 else options.get("_depth", 0)) == 0
    return get(cid, *args, **options)
store.get = counted
result = repo.diff(sys.argv[2], sys.argv[3], numeric=sys.argv[4] == "numeric")
print(json.dumps({"requests": requests[0], "decoded": store.reads.chunks, "raw_bytes": store.reads.raw_bytes,
                  "changed_chunks": sum(t.chunks_changed for t in result.tensors)}))
"""


# -- measuring ----------------------------------------------------------------------------


@dataclass
class Result:
    case: str  # a key of CASES
    method: str
    best: Proc
    times: list[float]
    reads: dict[str, int] | None = None  # COUNT_READS's answer, for mgit rows


def measure(
    case: str, repo: Path, base: Path, version: Path, mgit: list[str], runner: Runner, reps: int
) -> tuple[list[Result], dict[str, dict]]:
    """The three ways for one version, fastest of ``reps`` each; also both sides' numbers."""
    results, outputs = [], {}
    for flag, mode in (("--stat", "stat"), ("--json", "numeric")):
        counter = [*python_prefix(mgit), "-c", COUNT_READS, str(repo), "main", case, mode]
        reads = json.loads(runner.run(counter, repo).output)
        last: list[Proc] = []

        def run(flag: str = flag, last: list[Proc] = last) -> Proc:
            last[:] = [runner.run([*mgit, "diff", "main", case, flag], repo, timed=True)]
            return last[0]

        best, times = best_of(reps, lambda: None, run)
        results.append(Result(case, f"mgit diff {flag}", best, times, reads))
        if flag == "--json":
            outputs["mgit"] = {t["name"]: t for t in json.loads(last[0].output)["tensors"]}
    cmd = [sys.executable, __file__, "--baseline", str(base), str(version)]
    best, times = best_of(reps, lambda: None, lambda: runner.run(cmd, repo, timed=True))
    results.append(Result(case, "safetensors load_file + torch (float64)", best, times))
    outputs["baseline"] = json.loads(best.output)
    return results, outputs


# -- reporting ----------------------------------------------------------------------------


def results_table(results: list[Result], data: dict[str, int], raw: int) -> str:
    labels = dict(CASES)
    header = ["version B", "method", "wall time (s)", "changed tensors, A + B (MB)", "MB/s", "vs baseline"]
    header += ["peak RSS (MB)", "tensor data decoded (MB)", "other load", "all runs (s)"]
    rows = []
    for r in results:
        p = r.best
        base = next(x for x in results if x.case == r.case and x.reads is None)
        decoded = r.reads["raw_bytes"] if r.reads else 2 * raw
        rows.append(
            [
                labels[r.case],
                f"`{r.method}`" if r.method.startswith("mgit") else r.method,
                f"{p.seconds:.2f}",
                f"{data[r.case] / MB:.0f}",
                f"{data[r.case] / MB / p.seconds:.0f}",
                f"{base.best.seconds / p.seconds:.1f}×" if r is not base else "1.0×",
                f"{p.max_rss / MB:.0f}",
                f"{decoded / MB:.0f}",
                f"{p.load_share:.0%}",
                fmt_times(r.times, 2),
            ]
        )
    return table(header, "llrrrrrrrl", rows)


def checks_table(checks: list[Check]) -> str:
    labels = dict(CASES)
    header = ["version B", "tensors", "changed per mgit / expected", "changed chunks", "max rel. diff ‖Δ‖"]
    header += ["max rel. diff cos", "max rel. diff ‖A‖", "max rel. diff max\\|Δ\\|", "within 1e-6"]
    rows = []
    for c in checks:
        w = c.worst
        changed = f"{c.changed} / {c.expected}{'' if c.same_set else ' (**differ**)'}"
        worst = [f"{w[q]:.1e}" for q in QUANTITIES]
        rows.append([labels[c.case], c.tensors, changed, c.changed_chunks, *worst, yes_no(c.ok)])
    return table(header, "lrrrrrrrl", rows)


def reads_note(results: list[Result]) -> str:
    parts = []
    for r in results:
        if r.reads and r.method.endswith("--json"):
            x = r.reads
            parts.append(
                f"{dict(CASES)[r.case]}: {x['changed_chunks']} changed chunk pairs, {x['requests']} chunk reads "
                f"requested, {x['decoded']} chunks decoded ({x['raw_bytes'] / MB:.0f} MB), of which "
                f"{x['decoded'] - x['requests']} delta bases"
            )
    stat = [r.reads["requests"] for r in results if r.reads and r.method.endswith("--stat")]
    return (
        f"Chunk reads (counted untimed through mgit's Python API, the same `repo.diff` the CLI runs): "
        f"`--stat` requested {' and '.join(map(str, stat))} chunks; `--json`: " + "; ".join(parts) + ". "
        "A delta base is decoded when a requested chunk is stored as a delta against it: here B's chunk "
        "against A's chunk at the same place, which the same diff also requests, so it is decoded twice."
    )


def report(
    results: list[Result], checks: list[Check], data: dict[str, int], raw: int, plan: ModelPlan, run: RunContext
) -> str:
    """This benchmark's docs section (also printed to stdout)."""
    s = plan.shape
    layers = changed_layers(plan.layers)
    all_ok = all(c.ok for c in checks)
    lines = [
        *run.header(SECTION_TITLE),
        f"Input: version A is bench_core's generated llama-like bf16 model, {raw / GB:.3f} GB of tensors "
        f"({plan.layers} layers, hidden {s.hidden}, intermediate {s.intermediate}, vocab {s.vocab}, "
        f"{len(plan.tensors)} tensors in {SHARDS} safetensors shards, weights N(0, 0.02) from seed {SEED}). "
        f"B is a dense fine-tune: every tensor plus Gaussian noise of std {NOISE} × its scale (0.02 for weights, "
        f"1 for norms), rounded to bf16, so every chunk changes. B' takes layers {layers[0]}–{layers[-1]} "
        f"({len(layers)} of {plan.layers}) from B and every other byte from A. One mgit repository holds A on "
        "`main`, B on branch `dense` and B' on branch `partial`; the commands are `mgit diff main dense` and "
        "`mgit diff main partial`.",
        "",
        results_table(results, data, raw),
        "",
        checks_table(checks),
        "",
        f"mgit's numbers match the baseline's (relative difference ≤ {TOLERANCE:g} per tensor for ‖Δ‖ and cosine, "
        f"and the same set of changed tensors): **{'yes' if all_ok else 'NO'}**.",
        "",
        reads_note(results),
        "",
        "How it was measured: every command is a separate process timed by wall clock (Python start-up and "
        "imports included), after an untimed `sync`, a wait until no other benchmark of this repository runs, "
        f"and a wait (up to the `--idle-wait` limit) until under {IDLE_BELOW:.0%} of the CPUs are busy; each "
        f"runs {run.reps} times, the table shows the fastest, `all runs` "
        "every one. The page cache cannot be dropped, so mgit's packs and the baseline's safetensors files are "
        "read warm. `--json` output (one record per tensor) goes to a temporary file instead of `/dev/null` so that "
        "its numbers can be checked. The baseline is this script's `--baseline A_DIR B_DIR`: for each shard, "
        "`safetensors.torch.load_file` of A's and B's file, then per tensor in torch float64 (exact for bf16 "
        "inputs) ‖B−A‖₂, ‖A‖₂, ‖B‖₂, A·B/(‖A‖‖B‖) and max|B−A|; it always reads both versions whole. "
        "Changed tensors, A + B: the bytes of the tensors the version changed, counted in both versions; MB/s "
        "is that over the wall time for every row (also for `--stat`, which reads no tensor data), so rows are "
        "comparable. Tensor data decoded: raw bytes of the chunks mgit decoded (delta bases included), or, for "
        "the baseline, both versions' files. Peak RSS is the largest resident set of the process as the "
        f"kernel reports it; {run.inherited_rss()} "
        "(what `true` reports), and the pages of memory-mapped files touched (mgit maps its pack "
        "files; safetensors maps the file it loads). Other load is the share of all CPUs that other processes "
        "used during the fastest run. Relative difference: |x − y| / max(|x|, |y|) (0 when both are 0), "
        "largest over all tensors.",
    ]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__)
    cli.add_common(
        p,
        workdir="bench-work/diff",
        size_gb=1.0,
        quick="a ~0.1 GB model (overrides --size-gb)",
        reps=(3, "runs of every timed command; the fastest is reported"),
        other_wait=1800,
        keep="keep the mgit repository afterwards",
    )
    old_name = "the same as --other-wait (its old name)"
    p.add_argument("--bench-wait", type=float, dest="other_wait", default=cli.argparse.SUPPRESS, help=old_name)
    p.add_argument(
        "--baseline", nargs=2, type=Path, metavar=("A_DIR", "B_DIR"), help="(internal) run the baseline, print JSON"
    )
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    if args.baseline:
        print(json.dumps(load_and_compare(*args.baseline)))
        return 0
    workdir = args.workdir.resolve()
    size_gb = 0.1 if args.quick else args.size_gb
    cli.check_free_disk(workdir, int(size_gb * GB * 6))  # A, B, B' and their commits
    workdir.mkdir(parents=True, exist_ok=True)
    mgit, where = mgit_command(workdir, args.mgit_rev)
    versions = {
        "mgit": mgit_label(mgit, where),
        "safetensors": importlib.metadata.version("safetensors"),  # no torch in this process: children inherit it
    }
    versions["torch"] = version_of([sys.executable, "-c", "import torch; print(torch.__version__)"]) or "?"
    base, plan, sums = ensure_model(workdir, size_gb)
    raw = sum((base / name).stat().st_size for name in sums if name.endswith(".safetensors"))
    dirs = ensure_versions(workdir, base, plan, sums)
    runner = Runner(tool_env(workdir), args.idle_wait, args.other_wait)
    repo = workdir / "repo"
    print("committing A, B and B' ...", flush=True)
    commit_branches(runner, mgit, repo, [("main", base), *((name, dirs[name]) for name, _ in CASES)])
    expected = {"dense": changed_bytes(base, None), "partial": changed_bytes(base, changed_layers(plan.layers))}
    results: list[Result] = []
    checks: list[Check] = []
    for case, label in CASES:
        print(f"{label} ...", flush=True)
        case_results, outputs = measure(case, repo, base, dirs[case], mgit, runner, args.reps)
        results += case_results
        numeric = next(r for r in case_results if r.method == "mgit diff --json")
        assert numeric.reads is not None
        checks.append(check(case, outputs, expected[case][0], numeric.reads["changed_chunks"]))
    run = RunContext(cli.command_line(argv, __file__), workdir, versions, args.reps, runner.rss_floor(workdir))
    data = {case: expected[case][1] for case, _ in CASES}
    publish(report(results, checks, data, raw, plan, run), SECTION_TITLE, args.write_docs)
    if not args.keep:
        shutil.rmtree(repo, ignore_errors=True)
    return 0 if all(c.ok for c in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
