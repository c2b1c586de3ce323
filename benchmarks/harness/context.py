"""What a report says about its run besides the numbers: the command, the workdir, the versions
measured, the repetitions and the memory a timed child inherits.

Why: every report() took the same five arguments (command, workdir, versions, reps, RSS floor)
and wrote the same sentences from them; one record carries them and writes those sentences once.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from harness.models import MB
from harness.report import header_lines


@dataclass
class RunContext:
    """One run of a benchmark, as its sections describe it."""

    command: str  # as typed, or as it would be typed (cli.command_line)
    workdir: Path
    versions: dict[str, str] = field(default_factory=dict)  # tool → version, as the header lists them
    reps: int = 1  # runs of every timed step
    rss_floor: int = 0  # peak RSS a child inherits at fork (Runner.rss_floor), bytes
    took: str = ""  # report.took(...), for the header's command line

    def header(self, title: str) -> list[str]:
        """A section's first lines: its title, the command, date, machine and versions."""
        return header_lines(title, self.command, self.workdir, self.versions, self.took)

    def inherited_rss(self) -> str:
        """The part of every peak RSS that is the launching process's, not the tool's."""
        return f"it includes about {self.rss_floor / MB:.0f} MB inherited from the launching process at fork"


def skipped_baselines(tools: Iterable[tuple[str, object]]) -> list[str]:
    """The closing lines naming the peers that were not installed (none: no lines), given
    ``(name, what ran it)`` pairs where a falsy second item means skipped."""
    skipped = [name for name, ok in tools if not ok]
    if not skipped:
        return []
    return ["", f"Skipped baselines: {', '.join(skipped)} (not installed; see the script's output)."]
