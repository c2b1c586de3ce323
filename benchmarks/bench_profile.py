"""Profile benchmark: where the time of `mgit merge` and `mgit add` goes, for two mgit revisions.

Why: to know where the time of an exact merge (and of ingest) goes — decode, verify, math,
encode, hash, statistics, write, start-up and the rest, before and after a change, with the share of
the two cores used. py-spy samples every thread of the measured process from outside
(harness/profile.py sorts the samples); this script runs, for each revision:

1. the base and K experts (bench_merge's generated fine-tunes, cached) committed to a fresh
   repository by that revision (untimed);
2. `mgit merge` of the K experts (task_arithmetic, weights 1/K) onto a new branch, exact, and with
   `--budget 10%`, each under py-spy;
3. `mgit add` + `commit` of the base into a fresh repository under py-spy (one process each: both
   profiles are added up);
4. prints one table per command (a column per revision) and, with ``--write-docs``, replaces this
   benchmark's section of benchmarks/results/bench_profile.md.

py-spy is installed from PyPI into the baselines' environment (never the test environment). Its
sampling adds a little overhead, the same for both revisions; wall times here are for reading the
shares, not for comparing tools (the other benchmarks do that). The page cache is left warm.
"""

from __future__ import annotations

import shutil
import sys
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness import cli, merges
from harness.machine import lock_workdir
from harness.models import GB
from harness.profile import Profile, ensure_py_spy, profile_table, read_profile, record_command
from harness.report import header_lines, publish, table, took
from harness.runner import fresh_dir

SECTION_TITLE = "## Where the time goes (bench_profile.py)"
SIZE_GB = 0.6
QUICK_SIZE_GB = 0.05
K = 8
BUDGET = "10%"


@dataclass
class Profiled:
    """One revision's profiles, by command."""

    rev: str
    label: str
    runs: dict[str, Profile] = field(default_factory=dict)


def parse_args(argv: Sequence[str] | None = None) -> cli.argparse.Namespace:
    p = cli.parser(__doc__ or "")
    cli.add_common(
        p,
        workdir="bench-work/profile",
        size_gb=SIZE_GB,
        quick=f"a {QUICK_SIZE_GB} GB model and K = 2",
        other_wait=1800,
        keep="keep the run's repositories",
        mgit_rev=False,
    )
    p.add_argument("--revs", required=True, help="the two mgit revisions to compare, BEFORE,AFTER (commits)")
    p.add_argument("--k", type=int, default=K, help=f"experts merged (default {K})")
    cli.add_mergekit_venv(p)
    args = p.parse_args(argv)
    args.reps = 1
    args.revs = [r.strip() for r in args.revs.split(",") if r.strip()]
    if len(args.revs) != 2:
        p.error("--revs takes two revisions: BEFORE,AFTER")
    return args


def profiled(s: merges.Setup, py_spy: Path, cmd: list[str], cwd: Path, name: str) -> Profile:
    """Run ``cmd`` under py-spy (after the runner's quiet-machine waits) and read its samples."""
    raw = s.scratch / f"{name}.raw"
    proc = s.runner.run(record_command(py_spy, cmd, raw), cwd, timed=True)
    return read_profile(raw, proc.seconds)


def added(a: Profile, b: Profile) -> Profile:
    """Two processes' profiles as one (add + commit)."""
    return Profile(a.wall_s + b.wall_s, Counter(a.samples) + Counter(b.samples), a.rate)


def profile_rev(
    args: cli.argparse.Namespace, workdir: Path, rev: str, k: int, size_gb: float, py_spy: Path
) -> Profiled:
    args.mgit_rev = rev
    s = merges.prepare(args, workdir, size_gb, k, with_mergekit=False)
    out = Profiled(rev, s.versions["mgit"])
    experts = [f"expert-{i}" for i in range(1, k + 1)]
    mgit = [*s.mgit, "-q", "-C", str(s.repo)]
    merge = [*mgit, "merge", *experts, "--method", "task_arithmetic", "--weights", f"{1 / k}"]
    out.runs["merge, exact"] = profiled(s, py_spy, [*merge, "-b", "p-exact"], s.repo, "merge-exact")
    s.runner.run([*mgit, "checkout", "main"], s.repo)
    budgeted = [*merge, "--budget", BUDGET, "-b", "p-budget"]
    out.runs[f"merge, --budget {BUDGET}"] = profiled(s, py_spy, budgeted, s.repo, "merge-budget")
    fresh = fresh_dir(s.scratch / "add")
    s.runner.run([*s.mgit, "-q", "init"], fresh)
    shutil.copytree(s.base, fresh / "model")
    add = profiled(s, py_spy, [*s.mgit, "-q", "add", "model"], fresh, "add")
    commit = profiled(s, py_spy, [*s.mgit, "-q", "commit", "-m", "base"], fresh, "commit")
    out.runs["add + commit of the base"] = added(add, commit)
    if not args.keep:
        shutil.rmtree(s.scratch, ignore_errors=True)
    return out


def report(found: Sequence[Profiled], command: str, workdir: Path, k: int, size_gb: float, wall: float) -> str:
    versions = {f"mgit ({p.rev})": p.label for p in found}
    lines = header_lines(SECTION_TITLE, command, workdir, versions, took(wall, 0.0))
    lines += [
        "",
        f"Input: bench_merge's generated llama-like bf16 base of about {size_gb:g} GB and K = {k} of its "
        "fine-tune-like experts (a third of the tensors frozen), committed by each revision to a fresh "
        f"repository. Each command runs once under py-spy (every thread sampled {100} times a second); a "
        "sample goes to the first step it is in (harness/profile.py): seconds are thread-seconds, shares "
        "are of the busy thread-seconds, and the last rows compare busy thread-seconds with wall time "
        "(2 cores: 100% is both busy all the time). Warm page cache.",
    ]
    for name in found[0].runs:
        header, rows = profile_table([(f"{p.rev}", p.runs[name]) for p in found])
        lines += ["", f"**{name}**", "", table(header, "l" + "r" * (len(header) - 1), rows)]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    started = time.perf_counter()
    command = cli.command_line(argv, __file__)
    workdir = args.workdir.resolve()
    size_gb = QUICK_SIZE_GB if args.quick else args.size_gb
    k = 2 if args.quick else args.k
    cli.check_free_disk(workdir, int(size_gb * GB * (2 * k + 6)))  # base, experts, their commits, outputs
    lock_workdir(workdir, "bench_profile.py")
    py_spy = ensure_py_spy()
    if py_spy is None:
        return 1
    found = [profile_rev(args, workdir, rev, k, size_gb, py_spy) for rev in args.revs]
    section = report(found, command, workdir, k, size_gb, time.perf_counter() - started)
    publish(section, SECTION_TITLE, args.write_docs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
