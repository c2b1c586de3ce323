"""The light commands (``--help``, ``status``, ``log``, ``branch``): what a user waits for at every
prompt, timed warm over many runs in mgit and in git, with the floor under any mgit command.

Why: git answers these in milliseconds, so start-up dominates and one run says little; each
command runs many times as its own process in a repository holding the model committed once,
and a Python process importing only what every mgit command loads shows what no command can beat.
"""

from __future__ import annotations

import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.runner import MODEL_DIR, Runner, fresh_copy
from harness.tools import Tools

# What any mgit command loads before its own code runs: the interpreter, click, dulwich and rich.
FLOOR_IMPORTS = "import click, dulwich.repo, rich.console"


@dataclass(frozen=True)
class LightTiming:
    """One command of one tool, run ``len(times)`` times in a row (warm)."""

    tool: str
    args: tuple[str, ...]
    times: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.times)


def light_repositories(model: Path, runs: Path, runner: Runner, tools: Tools) -> dict[str, tuple[list[str], Path]]:
    """tool → (its command, a repository holding the model committed once). An untimed status
    in each first: it vouches for the files' stats (as any status after an edit does), so every
    timed status finds a clean tree without reading a file."""
    mgit, git = [*tools.mgit, "--no-pager"], ["git", "--no-pager"]
    m = fresh_copy(model, runs / "light-mgit")
    for cmd in ([*mgit, "-q", "init"], [*mgit, "-q", "add", MODEL_DIR], [*mgit, "commit", "-m", "base"]):
        runner.run(cmd, m)
    g = fresh_copy(model, runs / "light-git")
    lfs = [["git", "lfs", "install", "--local"], ["git", "lfs", "track", "*.safetensors"]] if tools.git_lfs else []
    for cmd in (["git", "init", "-q"], *lfs, ["git", "add", "."], ["git", "commit", "-q", "-m", "base"]):
        runner.run(cmd, g)
    runner.run([*mgit, "status"], m)
    runner.run([*git, "status"], g)
    return {"mgit": (mgit, m), "git + git-lfs" if tools.git_lfs else "git": (git, g)}


def time_light(
    repos: dict[str, tuple[list[str], Path]], runner: Runner, commands: Sequence[tuple[str, ...]], runs: int
) -> list[LightTiming]:
    """Every one of ``commands`` in every tool, ``runs`` times each, one process per run; then the
    floor ("floor"): a Python process importing only the libraries every mgit command loads."""
    out = []
    for args in commands:
        for tool, (cmd, where) in repos.items():
            times = [runner.run([*cmd, *args], where, timed=True).seconds for _ in range(runs)]
            out.append(LightTiming(tool, args, times))
    floor = [sys.executable, "-P", "-c", FLOOR_IMPORTS]
    out.append(LightTiming("floor", (), [runner.run(floor, repos["mgit"][1], timed=True).seconds for _ in range(runs)]))
    return out


def timing(timings: Sequence[LightTiming], args: tuple[str, ...], mgit: bool) -> LightTiming:
    """mgit's timing of ``args`` (``mgit``), or the peer's."""
    return next(t for t in timings if t.args == args and (t.tool == "mgit") == mgit and t.tool != "floor")
