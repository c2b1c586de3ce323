"""The options every benchmark shares, the command line it reports, and the free-disk check.

Why: the scripts had each spelled --workdir, --size-gb, --quick, --reps, --idle-wait, --keep,
--write-docs (and the mgit under test) their own way; here they are defined once, with the
defaults each script passes, and a run that would fill the disk stops before it starts, saying
what it needs.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from harness.models import GB
from harness.tools import REPO_ROOT

MGIT_REV_HELP = (
    "the mgit to measure: a commit of this repository (exported, so edits during the run do not count) "
    "or 'worktree' for the installed working tree; default HEAD"
)


def parser(doc: str) -> argparse.ArgumentParser:
    """An argument parser described by the first paragraph of the script's docstring."""
    return argparse.ArgumentParser(description=doc.split("\n\n")[0])


def add_common(
    p: argparse.ArgumentParser,
    *,
    workdir: str,
    size_gb: float | None = None,
    quick: str | None = None,
    reps: tuple[int, str] | None = None,
    idle_wait: bool = True,
    other_wait: float | None = None,
    keep: str | None = None,
    mgit_rev: bool = True,
    write_docs: str = "replace this benchmark's section in its file in benchmarks/results/",
) -> None:
    """The shared options, each only where the script has it (None: left out), with its defaults."""
    p.add_argument("--workdir", type=Path, default=REPO_ROOT / workdir, help="scratch directory (git-ignored)")
    if size_gb is not None:
        help = f"model size in GB (10^9 bytes); default {size_gb:g}"
        p.add_argument("--size-gb", type=float, default=size_gb, help=help)
    if quick is not None:
        p.add_argument("--quick", action="store_true", help=quick)
    if reps is not None:
        p.add_argument("--reps", type=int, default=reps[0], help=reps[1])
    if idle_wait:
        p.add_argument("--idle-wait", type=float, default=120, help="most seconds to wait for an idle machine per run")
    if other_wait is not None:
        p.add_argument(
            "--other-wait", type=float, default=other_wait, help="most seconds to wait for other benchmarks per run"
        )
    if mgit_rev:
        p.add_argument("--mgit-rev", default="HEAD", help=MGIT_REV_HELP)
    if keep is not None:
        p.add_argument("--keep", action="store_true", help=keep)
    p.add_argument("--write-docs", action="store_true", help=write_docs)


def add_mergekit_venv(p: argparse.ArgumentParser) -> None:
    """--mergekit-venv, of the benchmarks that run mergekit."""
    p.add_argument(
        "--mergekit-venv", type=Path, help="mergekit's virtual environment (default: bench-work/.venv-mergekit)"
    )


def int_list(text: str) -> tuple[int, ...]:
    """An argument type: "25%,10%,5%" or "25,10,5" → (25, 10, 5); "" → ()."""
    try:
        return tuple(int(x.strip().removesuffix("%")) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a comma-separated list of integers: {text!r}") from None


def names_list(known: Sequence[str], what: str) -> Callable[[str], tuple[str, ...]]:
    """An argument type: a comma-separated list of the names ``known`` (e.g. merge methods, ``what``)."""

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(n.strip() for n in text.split(",") if n.strip())
        if unknown := set(names) - set(known):
            raise argparse.ArgumentTypeError(f"unknown {what}(s) {', '.join(sorted(unknown))}; of: {', '.join(known)}")
        return names

    return parse


def command_line(argv: Sequence[str] | None, script: str) -> str:
    """The command a report names: as typed, or as it would be typed for ``main(argv)``."""
    return shlex.join(["python", *sys.argv]) if argv is None else shlex.join(["python", script, *argv])


def disk_shortfall(free: int, need: int) -> str | None:
    """Why ``need`` bytes cannot be written where ``free`` are free (None: they can)."""
    if free >= need:
        return None
    return f"needs about {need / GB:.1f} GB free, has {free / GB:.1f} GB"


def free_disk(workdir: Path) -> int:
    """Free bytes on the disk that holds (or will hold) ``workdir``."""
    probe = workdir
    while not probe.exists():
        probe = probe.parent
    return shutil.disk_usage(probe).free


def check_free_disk(workdir: Path, need: int, hint: str = "pass a smaller --size-gb") -> None:
    """Stop cleanly (SystemExit, before anything is written) when the workdir's disk lacks ``need`` bytes."""
    reason = disk_shortfall(free_disk(workdir), need)
    if reason:
        raise SystemExit(f"not enough disk in {workdir}: this run {reason}; free some or {hint}")
