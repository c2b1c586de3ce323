"""bench_quality's merges: the experts committed (and sketched) in a repository, each merge run
through the Python API, and what a merged encoder scored.

Why: the quality script and its report both name a merge (method, budget, selection) and its
score by these records; the script keeps only which merges run, in what order, and how they are
scored.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from harness.minilm import base_dir

METHODS: dict[str, dict[str, Any]] = {
    "task_arithmetic": {"weight": 1.0, "lambda": 0.7},
    "ties": {"weight": 1.0, "density": 0.5},
}
# importance / per-expert / uniform: whole chunks only (--no-sketches); sketch / sketch-per-expert: the
# experts' stored low-rank sketches as well (mgit sketch), chosen by the planner over resolutions;
# dare: the experts' DARE sketches instead (mgit sketch --kind dare, in a second repository: one
# sketch per commit), with the default per-expert fairness
SELECTIONS = ("importance", "uniform", "per-expert", "sketch", "sketch-per-expert", "dare")
SKETCH_SHARE = "50%"  # each expert's sketch, stored once; a budget reads a prefix of its ranks


@dataclass(frozen=True)
class Merge:
    method: str
    budget: int | None  # percent; None: exact
    select: str = "importance"

    @property
    def branch(self) -> str:
        return f"{self.method}-{'exact' if self.budget is None else f'{self.budget}pct-{self.select}'}"


@dataclass
class Scored:
    label: str
    accuracy: dict[str, float]  # task → test accuracy
    expert_bytes: int | None = None  # stored expert bytes the merge read
    merge: Merge | None = None

    @property
    def average(self) -> float:
        return sum(self.accuracy.values()) / len(self.accuracy)


def _timed(repo_dir: Path, *args: str) -> float:
    """Seconds one `mgit` command takes, as a user runs it (its own process, start-up included)."""
    started = time.perf_counter()
    subprocess.run([sys.executable, "-m", "mgit", *args], cwd=repo_dir, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - started


def commit_all(repo_dir: Path, paths: dict[str, Path], timings: dict[str, list[float]], kind: str = "lowrank") -> Any:
    """A fresh repository: the base on main, expert NAME on branch task-NAME, each expert then
    sketched (``kind``; ``timings``: seconds of each expert's `mgit add`, and of its `mgit sketch`)."""
    from mgit import Repository

    shutil.rmtree(repo_dir, ignore_errors=True)
    repo = Repository.init(repo_dir)
    repo.config_set("user.name", "bench")
    repo.config_set("user.email", "bench@localhost")
    for name, src in [("base", base_dir()), *paths.items()]:
        if name != "base":
            repo.checkout("main")
            repo.checkout(create_branch=f"task-{name}")
        shutil.rmtree(repo_dir / "model", ignore_errors=True)
        shutil.copytree(src, repo_dir / "model", ignore=shutil.ignore_patterns("head.pt"))
        if name == "base":
            repo.add(["model"])
            repo.commit(name)
            continue
        timings["add"].append(_timed(repo_dir, "add", "model"))
        repo.commit(name)
        timings["sketch"].append(_timed(repo_dir, "sketch", f"task-{name}", "--share", SKETCH_SHARE, "--kind", kind))
        made = repo.sketch_record(f"task-{name}")
        assert made is not None
        timings["captured"].append(made.captured_share)
        timings["stored_share"].append(made.stored_bytes / made.expert_bytes)
    repo.checkout("main")
    return repo


def run_merges(repos: dict[str, Any], names: list[str], merges: list[Merge]) -> dict[Merge, int]:
    """Each merge as a branch (of the repository whose sketches it reads); the stored expert
    bytes it read (its plan record)."""
    read = {}
    for m in merges:
        params = METHODS[m.method]
        budget = None if m.budget is None else f"{m.budget}%"
        fairness = "per-expert" if m.select.endswith("per-expert") or m.select == "dare" else "global"
        select = "uniform" if m.select == "uniform" else "importance"
        repo = repo_of(repos, m)
        sha = repo.merge(
            [f"task-{n}" for n in names],
            m.method,
            base="main",
            branch=m.branch,
            checkout=False,
            budget=budget,
            budget_select=select,
            budget_fairness=fairness,
            budget_sketches=m.select.startswith("sketch") or m.select == "dare",
            **params,
        )
        read[m] = int(repo.merge_record(sha)["bytes"]["experts_measured"])
    return read


def repo_of(repos: dict[str, Any], m: Merge) -> Any:
    return repos["dare"] if m.select == "dare" else repos["lowrank"]
