"""The tools that store a model and bring it back: mgit, git + git-lfs and DVC as command recipes,
each measured the same way, and finding one tool's step among the results.

Why: "store it, delete it, check it out again" is the same experiment for every tool, so a tool is
data (its commands) and the measuring is written once; a skipped peer (git-lfs or DVC missing) is
simply not in the list. bench_core stores one model (``store_and_checkout``); bench_scale stores a
base, then a version over it (stores.store_versions_and_checkout), its git-lfs recipe set up untimed.
"""

from __future__ import annotations

import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from harness.runner import MODEL_DIR, Result, Runner, best_of, checked_best_of, disk_usage, fresh_copy
from harness.tools import Tools


@dataclass(frozen=True)
class Contender:
    """One tool: how to set up a repository, store the model in it, and materialise it again."""

    name: str
    setup: list[list[str]]  # untimed, in a fresh directory holding the model
    store: list[list[str]]  # timed together: storing the model
    store_label: str
    store_dir: str  # what holds the stored model, measured like `du -s`
    checkout: list[str]  # timed: bring back the deleted model directory
    checkout_label: str


def contenders(tools: Tools, message: str = "base", timed_track: bool = True, git_add: str = ".") -> list[Contender]:
    """mgit, and the peers that are installed: git + git-lfs, DVC. Commits say ``message``; git-lfs's
    ``lfs track`` is timed with the store (``timed_track``) or part of the untimed setup, and git adds
    ``git_add`` (a pathspec, or ``-A``)."""
    mgit = [*tools.mgit, "-q"]
    out = [
        Contender(
            "mgit",
            [[*mgit, "init"]],
            [[*mgit, "add", MODEL_DIR], [*mgit, "commit", "-m", message]],
            "add + commit",
            ".mgit",
            [*mgit, "checkout", "--force", "main"],
            "checkout --force main",
        )
    ]
    if tools.git_lfs:
        track = [["git", "lfs", "track", "*.safetensors"]]
        commit = [["git", "add", git_add], ["git", "commit", "-q", "-m", message]]
        out.append(
            Contender(
                "git + git-lfs",
                [["git", "init", "-q"], ["git", "lfs", "install", "--local"], *([] if timed_track else track)],
                [*(track if timed_track else []), *commit],
                "lfs track + add + commit" if timed_track else "add + commit",
                ".git",
                ["git", "checkout", "--", MODEL_DIR],
                "checkout -- model",
            )
        )
    if tools.dvc:
        dvc = tools.dvc
        out.append(
            Contender(
                "dvc",
                [[dvc, "init", "--no-scm", "-q"]],
                [[dvc, "add", "-q", MODEL_DIR]],
                "add",
                ".dvc/cache",
                [dvc, "checkout", "-q"],
                "checkout",
            )
        )
    return out


def store_and_checkout(
    c: Contender, model: Path, run_dir: Path, runner: Runner, sums: dict[str, str], reps: int
) -> list[Result]:
    """Store the model ``reps`` times (a fresh directory each), then check it out ``reps`` times,
    every checkout checked byte for byte: [the store step, the checkout step]."""

    def prepare_store() -> None:
        fresh_copy(model, run_dir)
        for cmd in c.setup:
            runner.run(cmd, run_dir)

    best, times = best_of(reps, prepare_store, lambda: runner.steps(c.store, run_dir))
    stored = Result(c.name, c.store_label, best, times, store_bytes=disk_usage(run_dir / c.store_dir))
    checkout = checked_best_of(
        c.name,
        c.checkout_label,
        reps,
        lambda: shutil.rmtree(run_dir / MODEL_DIR),
        lambda: runner.run(c.checkout, run_dir, timed=True),
        run_dir / MODEL_DIR,
        sums,
    )
    return [stored, checkout]


def find(results: Sequence[Result], tool: str, stored: bool) -> Result | None:
    """``tool``'s store step (``stored``) or its materialising step, if it ran."""
    return next((r for r in results if r.tool == tool and (r.store_bytes is not None) == stored), None)
