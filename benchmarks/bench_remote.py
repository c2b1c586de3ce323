"""Remote benchmark: push, then clone, a base model and three fine-tunes — mgit vs DVC.

Why: sharing models is where copies multiply: every fine-tune pushed whole, every clone
pulling every version whole. mgit's claim is that only chunks the other side lacks travel,
compressed and delta-encoded (a fine-tune costs about what changed), and that a partial clone
fetches only what its checkout needs. This script measures that side by side with DVC (the
usual tool for data beside git), on one machine, in one run:

1. reuse (or generate) bench_storage's llama-like bf16 base and its dense, frozen-half and
   LoRA fine-tunes (cached under bench-work/storage);
2. mgit: commit the base on main and each fine-tune on its own branch; push the four branches
   (timed, one `mgit push` each) to a fresh directory remote and to `mgit serve` on
   127.0.0.1; clone each remote (all versions) and partial-clone it (graph + the checked-out
   version's chunks), timed; bytes are what `--json` reports on the wire;
3. DVC (its own virtual environment): the four versions as consecutive git commits, `dvc push`
   of every commit to a local remote directory, then `git clone` + `dvc pull --all-commits`
   (all versions) and `git clone` + `dvc pull` (the checked-out version); bytes are the
   remote's and the clone cache's sizes on disk;
4. check every clone byte for byte (sha256) against the version it checked out; print
   Markdown tables and, with ``--write-docs``, replace this benchmark's section of
   benchmarks/results/bench_remote.md.

Nothing is asserted; numbers are reported. GB = 10^9 bytes, MB = 10^6 bytes.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from pathlib import Path

from harness import cli
from harness.context import RunContext
from harness.models import GB, SHARDS, ensure_model
from harness.report import fmt_mb, publish, table
from harness.runner import Runner, fresh_dir
from harness.tools import (
    BASELINES_VENV,
    REPO_ROOT,
    commit_branches,
    ensure_dvc,
    mgit_command,
    mgit_label,
    tool_env,
    version_of,
)
from harness.transfers import Transfers, dvc_transfers, mgit_serve, mgit_transfers
from harness.variants import Version, ensure_versions

SECTION_TITLE = "## Remotes: push and clone (bench_remote.py)"
FINE_TUNES = ("dense", "frozen-half", "lora")
VERSIONS = ("base", *FINE_TUNES)
DEFAULT_SIZE_GB = 0.6  # bench_storage's default: its cached model and variants are reused


# -- report -------------------------------------------------------------------------------


def results_table(outcomes: list[Transfers]) -> str:
    header = ["remote", "tool", "push: 4 versions (s)", "push (MB)", "clone, all versions (s)", "clone (MB)"]
    header += ["checked-out version only (s)", "(MB)", "byte-exact"]
    rows = []
    for o in outcomes:
        exact = "yes" if o.exact and all(o.exact.values()) else f"**no** ({o.exact})"
        pushed = sum(s.bytes or 0 for s in o.push)
        assert o.clone is not None and o.partial is not None
        push = [f"{sum(s.seconds for s in o.push):.1f}", fmt_mb(pushed, "—")]
        clones = [
            f"{o.clone.seconds:.1f}",
            fmt_mb(o.clone.bytes, "—"),
            f"{o.partial.seconds:.1f}",
            fmt_mb(o.partial.bytes, "—"),
        ]
        rows.append([o.remote, o.tool, *push, *clones, exact])
    return table(header, "llrrrrrrl", rows)


def push_table(outcomes: list[Transfers], versions: dict[str, Version]) -> str:
    header = ["version", "raw (MB)", *(f"{o.tool} → {o.remote}: MB (s)" for o in outcomes)]
    rows = []
    for i, name in enumerate(VERSIONS):
        cells = [f"{fmt_mb(o.push[i].bytes, '—')} ({o.push[i].seconds:.1f})" for o in outcomes]
        rows.append([name, fmt_mb(versions[name].raw, "—"), *cells])
    return table(header, "l" + "r" * (len(header) - 1), rows)


def report(outcomes: list[Transfers], versions: dict[str, Version], run: RunContext, examples: list[str]) -> str:
    base = versions["base"]
    lines = [
        *run.header(SECTION_TITLE),
        f"Input: bench_storage's generated llama-like bf16 base model ({base.raw / GB:.3f} GB, {SHARDS} shards) "
        f"and three fine-tunes of it: {'; '.join(f'{n}: {versions[n].what}' for n in FINE_TUNES)}. "
        "mgit holds the base on `main` and each fine-tune on its own branch; DVC holds the four versions as "
        "consecutive git commits. Every remote is on this machine (a directory, or `mgit serve` on 127.0.0.1): "
        "the numbers are the tools' own costs, not a network's.",
        "",
        results_table(outcomes),
        "",
        "Per version pushed (each push sends what the remote lacks):",
        "",
        push_table(outcomes, versions),
        "",
        "What the columns mean: *push* is one `mgit push REMOTE BRANCH` per version (DVC: `dvc push` after each "
        "version's commit); mgit's bytes are what `--json` reports on the wire (chunk records and git objects), "
        "DVC's the growth of its remote directory on disk. *clone, all versions* is `mgit clone URL DIR` (every "
        "branch's objects and chunks, the base checked out) against `git clone` + `dvc pull --all-commits`; "
        "*checked-out version only* is `mgit clone --partial` (the graph, then only the chunks the checkout "
        "needs) against `git clone` + `dvc pull` at the base's commit. DVC's clone bytes are its cache's size on "
        "disk. Byte-exact: the clones' model files hashed (sha256) against the version checked out (and, for "
        "mgit's full clone, a fine-tune checked out afterwards). "
        "The remotes here are local, so bytes cost little time and the clone columns mostly measure what each "
        "receiver does with them: DVC copies its cache files as they are, while mgit decodes every chunk it "
        "receives and checks it against its BLAKE3 id before storing it, then decodes the checked-out version "
        "again to write the working tree.",
        "",
        "How it was measured: every timed command is a separate process, after an untimed `sync` and a wait "
        "for an idle machine; each ran once. Commands, e.g.:",
        "",
        "```",
        *examples,
        "```",
    ]
    return "\n".join(lines) + "\n"


# -- main ---------------------------------------------------------------------------------


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__)
    cli.add_common(p, workdir="bench-work/remote", size_gb=DEFAULT_SIZE_GB, other_wait=0)
    cache_help = "where bench_storage keeps (or this script makes) the model and its variants"
    p.add_argument("--cache", type=Path, default=REPO_ROOT / "bench-work" / "storage", help=cache_help)
    p.add_argument("--no-dvc", action="store_true", help="skip the DVC baseline")
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    workdir, cache = args.workdir.resolve(), args.cache.resolve()
    cli.check_free_disk(workdir, int(args.size_gb * GB * 12))  # the versions, a repository, remotes and clones
    workdir.mkdir(parents=True, exist_ok=True)
    cache.mkdir(parents=True, exist_ok=True)
    base, _, sums = ensure_model(cache, args.size_gb)
    versions = {v.name: v for v in ensure_versions(cache, base, sums) if v.name in VERSIONS}
    mgit, where = mgit_command(workdir, args.mgit_rev)
    dvc = None if args.no_dvc else ensure_dvc(BASELINES_VENV)
    runner = Runner(tool_env(workdir), args.idle_wait, args.other_wait)
    scratch = fresh_dir(workdir / "runs")
    print("committing the base and the fine-tunes to an mgit repository ...", flush=True)
    repo = scratch / "repo"
    commit_branches(runner, mgit, repo, [("main" if n == "base" else n, versions[n].model) for n in VERSIONS])
    branches = ("main", *FINE_TUNES)
    print("mgit → directory remote ...", flush=True)
    remote = str(scratch / "remote.mgit")
    outcomes = [mgit_transfers(runner, mgit, repo, scratch, "directory", remote, versions, branches)]
    served = scratch / "served"
    served.mkdir()
    with mgit_serve(mgit, served, runner) as port:
        print("mgit → mgit serve (HTTP on 127.0.0.1) ...", flush=True)
        url = f"http://127.0.0.1:{port}/llama"
        outcomes.append(mgit_transfers(runner, mgit, repo, scratch, "http", url, versions, branches))
    if dvc is not None:
        print("dvc → directory remote ...", flush=True)
        outcomes.append(dvc_transfers(runner, dvc, scratch, versions, VERSIONS))
    tools = {
        "mgit": mgit_label(mgit, where),
        "dvc": (version_of([dvc, "--version"]) if dvc else None) or "not installed",
    }
    took = f" (took {(time.perf_counter() - started) / 60:.0f} min)"
    run = RunContext(cli.command_line(argv, __file__), workdir, tools, took=took)
    examples = [
        "mgit push directory main --json      # in the repository; then dense, frozen-half, lora",
        f"mgit clone --json {remote} DIR ; mgit clone --partial --json URL DIR",
        "dvc push ; git clone SRC DIR && cd DIR && dvc pull --all-commits   # (or dvc pull)",
    ]
    publish(report(outcomes, versions, run, examples), SECTION_TITLE, args.write_docs)
    return 0 if all(all(o.exact.values()) for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
