"""The one report writer: Markdown tables, a section's header lines, and the results files.

Why: every benchmark prints its results as a section (also to stdout) and, with ``--write-docs``,
replaces only its own section in its script's results file, ``benchmarks/results/<script>.md``
(the section headed by its title, up to the next ``## ``), so a later run updates the file in
place and keeps every other section. docs/benchmarks.md, the page users read, summarises these
files by hand: one table per claim, refreshed from the newest run on the reference host.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path

from harness.machine import core_rates, describe, filesystem, rates_line
from harness.models import GB, MB
from harness.runner import Proc, Result
from harness.tools import REPO_ROOT

RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
RESULTS_INTRO = """# {script}.py: raw runs

The full reports of `benchmarks/{script}.py`, each section as the script wrote it with
`--write-docs` (a later run replaces its own section here and keeps the others), with the reading
notes added by hand where a section has them. The summary a user reads is
[docs/benchmarks.md](../../docs/benchmarks.md); how to run the script: [benchmarks/README.md](../README.md).
"""


def row(cells: Iterable[object]) -> str:
    """One Markdown table row."""
    return "| " + " | ".join(str(c) for c in cells) + " |"


def table(header: Sequence[str], align: str, rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table: ``align`` has one letter per column, ``l`` (left) or ``r`` (right)."""
    if len(align) != len(header):
        raise ValueError(f"{len(header)} columns but {len(align)} alignments")
    rule = "|" + "".join("---:|" if a == "r" else "---|" for a in align)
    return "\n".join([row(header), rule, *(row(r) for r in rows)])


def header_lines(title: str, command: str, workdir: Path, versions: dict[str, str], took: str = "") -> list[str]:
    """The first lines of a section: its title, the command (and what it took), date, machine, versions."""
    m = describe()
    return [
        title,
        "",
        f"Command: `{command}`{took}  ",
        f"Date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}  ",
        f"Machine: {m['cpu']}, {m['ram']} RAM, {m['os']}, {filesystem(workdir)} disk; Python {m['python']}  ",
        f"{rates_line(core_rates())}  ",
        f"Versions: {', '.join(f'{k} {v}' for k, v in versions.items())}",
        "",
    ]


def took(wall: float, waited: float) -> str:
    """What a run took, for header_lines: " (took N min, plus M min waiting for other benchmarks)"."""
    return f" (took {wall / 60:.0f} min, plus {waited / 60:.0f} min waiting for other benchmarks)"


def script_of(title: str) -> str:
    """The benchmark a section's title names: "## Diff (bench_diff.py)" -> "bench_diff"."""
    found = re.search(r"\((bench_\w+)\.py\b", title)
    if found is None:
        raise ValueError(f"section title names no benchmark script: {title!r}")
    return found.group(1)


def results_file(title: str) -> Path:
    """Where the section headed ``title`` is kept: its script's file in benchmarks/results/."""
    return RESULTS_DIR / f"{script_of(title)}.md"


def update_results(section: str, title: str, path: Path | None = None, after: str | None = None) -> None:
    """Create or replace the section headed ``title`` (this benchmark's) in its results file (or
    ``path``); keep every other section as it is. A new section goes right after the one headed
    ``after`` when there is one, else at the end."""
    path = results_file(title) if path is None else path
    text = path.read_text() if path.exists() else RESULTS_INTRO.format(script=script_of(title))
    lines = text.splitlines(keepends=True)

    def span(heading: str) -> tuple[int, int] | None:
        """[start, end) of the lines of the section with that heading."""
        start = next((i for i, line in enumerate(lines) if line.rstrip() == heading), None)
        if start is None:
            return None
        return start, next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))

    place = span(title)
    if place is None and after is not None:
        neighbour = span(after)
        place = None if neighbour is None else (neighbour[1], neighbour[1])  # empty, right after it
    if place is None:
        text = text.rstrip("\n") + "\n\n" + section
    else:
        head, rest = "".join(lines[: place[0]]), "".join(lines[place[1] :])
        head = head.rstrip("\n") + "\n\n" if head else ""
        text = head + section + ("\n" + rest if rest else "")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def publish(section: str, title: str, write_docs: bool) -> None:
    """Print the section; with ``write_docs``, also replace it in its results file."""
    print()
    print(section)
    if write_docs:
        update_results(section, title)
        print(f"updated {relative(str(results_file(title)))}")


def relative(text: str) -> str:
    """``text`` with paths inside the repository written relative to its root."""
    return text.replace(f"{REPO_ROOT}/", "")


def fmt_gb(n: int | None, missing: str = "") -> str:
    return missing if n is None else f"{n / GB:.3f}"


def fmt_mb(n: float | None, missing: str = "n/a") -> str:
    """Bytes as MB with thousands separators and one decimal ("1,234.5"); ``missing`` for None."""
    return missing if n is None else f"{n / MB:,.1f}"


def fmt_times(times: Sequence[float], digits: int = 1) -> str:
    """Every run's seconds: "12.3 / 11.9"."""
    return " / ".join(f"{t:.{digits}f}" for t in times)


def ratio(n: float | None, d: float | None, digits: int = 2, missing: str = "") -> str:
    """``n / d`` as a table cell to ``digits`` decimals; ``missing`` when either is None or ``d`` is 0."""
    return missing if n is None or not d else f"{n / d:.{digits}f}"


def yes_no(ok: bool) -> str:
    """``yes``, or a bold ``NO`` (a failed check a reader must not miss)."""
    return "yes" if ok else "**NO**"


def fmt_rss(p: Proc) -> str:
    """Peak RSS (MB), with the sampled peak of its anonymous part (allocated, not mapped files)."""
    anon = p.peaks.get("RssAnon")
    return f"{p.max_rss / MB:.0f}" + (f" ({anon / MB:.0f})" if anon else "")


def plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def steps_table(results: list[Result], raw: int) -> str:
    """Timed steps of tools on one model of ``raw`` bytes: time, MB/s, store, RSS, load, runs."""
    header = [
        "tool",
        "step",
        "wall time (s)",
        "MB/s",
        "store (GB)",
        "store / raw",
        "peak RSS (MB)",
        "other load",
        "byte-identical",
        "all runs (s)",
        "fastest run by command (s)",
    ]
    rows = []
    for r in results:
        p = r.best
        rows.append(
            [
                r.tool,
                r.step,
                f"{p.seconds:.2f}",
                f"{raw / MB / p.seconds:.0f}" if p.seconds > 0 else "",
                fmt_gb(r.store_bytes),
                "" if r.store_bytes is None else f"{r.store_bytes / raw:.3f}",
                f"{p.max_rss / MB:.0f}",
                f"{p.load_share:.0%}",
                "" if r.identical is None else ("yes" if r.identical else "**NO**"),
                " / ".join(f"{t:.2f}" for t in r.times),
                " + ".join(f"{t:.2f}" for t in p.parts) if len(p.parts) > 1 else "",
            ]
        )
    return table(header, "llrrrrrrlll", rows)
