"""Version stores: mgit, git + git-lfs and DVC each keeping a base model and its versions, and
what every version cost each of them.

Why: a model is rarely stored once; what a tool's store grows by per fine-tune or checkpoint is
the claim bench_storage measures. A store is one tool's repository with a base commit and then
each version as a commit on its branch (DVC, without git, adds every version to one cache); the
storing is timed, the growth measured like ``du -s``, and mgit also says (``mgit du --json``)
how the new chunks were encoded. Restores and branch switches are timed and checked byte for byte.
bench_scale keeps a base and one version with each contender's recipe, then checks the version out
(``store_versions_and_checkout``).
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from harness.contenders import Contender
from harness.runner import (
    MODEL_DIR,
    Proc,
    Result,
    Runner,
    best_of,
    checked_best_of,
    disk_usage,
    fresh_dir,
    place_model,
    sha256_files,
)
from harness.tools import json_output
from harness.variants import SPECS, Spec, Version

VERSION_STEPS = ("base", "dense fine-tune")  # what store_versions_and_checkout stores, in order


@dataclass
class Cost:
    """What storing one version cost one tool."""

    grown: int  # bytes the tool's store grew by (disk usage)
    proc: Proc  # the timed store step(s)
    new_chunks: int | None = None  # mgit: stored bytes of chunks the parent commit lacks (du)
    encodings: dict[str, int] = field(default_factory=dict)  # mgit: new chunks by encoding

    @property
    def seconds(self) -> float:
        return self.proc.seconds


def encodings_cell(enc: dict[str, int]) -> str:
    """mgit's new chunks by encoding: "3 delta, 1 zstd" (or "none")."""
    return ", ".join(f"{n} {k}" for k, n in sorted(enc.items())) or "none"


class VersionStore:
    """One tool's repository: a base commit, then each version as a commit on its branch."""

    name = ""
    store_dir = ""

    def __init__(self, root: Path, runner: Runner):
        self.root, self.runner = root, runner
        self.branch = ""

    def size(self) -> int:
        return disk_usage(self.root / self.store_dir)

    def init(self) -> None:
        """Untimed: a fresh repository holding nothing yet."""
        raise NotImplementedError

    def switch(self, spec: Spec) -> None:
        """Untimed: go to the spec's branch, creating it from the base when it is new."""

    def store_cmds(self, v: Version) -> list[list[str]]:
        raise NotImplementedError

    def after(self, v: Version, cost: Cost) -> None:
        """Untimed: tag the version, collect tool-specific numbers."""

    def add(self, v: Version, spec: Spec | None) -> Cost:
        before = self.size()
        if spec is not None:
            self.switch(spec)
        place_model(v.model, self.root)
        proc = self.runner.steps(self.store_cmds(v), self.root)
        cost = Cost(0, proc)
        self.after(v, cost)
        cost.grown = self.size() - before
        return cost

    def switch_cmds(self, branch: str) -> tuple[list[str], list[str]]:
        """(the timed switch to ``branch``, the untimed way back to a clean checkout of main)."""
        raise NotImplementedError

    def timed_switch(self, branch: str, step: str, sums: dict[str, str], reps: int) -> Result:
        """Switch from a clean checkout of main to ``branch``, ``reps`` times (back to main untimed),
        every run checked byte for byte against ``sums``."""
        to, back = self.switch_cmds(branch)
        return checked_best_of(
            self.name,
            step,
            reps,
            lambda: self.runner.run(back, self.root),
            lambda: self.runner.run(to, self.root, timed=True),
            self.root / MODEL_DIR,
            sums,
        )


class MgitStore(VersionStore):
    name, store_dir = "mgit", ".mgit"

    def __init__(self, root: Path, runner: Runner, mgit: list[str]):
        super().__init__(root, runner)
        self.mgit = [*mgit, "-q"]

    def init(self) -> None:
        self.runner.run([*self.mgit, "init", "."], fresh_dir(self.root))
        self.branch = "main"

    def mgit_run(self, *args: str) -> str:
        return self.runner.run([*self.mgit, *args], self.root).output

    def switch(self, spec: Spec) -> None:
        if spec.branch != self.branch:
            self.mgit_run("checkout", "-b", spec.branch, "main")
            self.branch = spec.branch

    def store_cmds(self, v: Version) -> list[list[str]]:
        return [[*self.mgit, "add", MODEL_DIR], [*self.mgit, "commit", "-m", v.name]]

    def du(self, rev: str) -> dict:
        return json_output(self.mgit_run("du", rev, "--json"))

    def after(self, v: Version, cost: Cost) -> None:
        if v.name != "base":
            self.mgit_run("tag", v.name)
        du = self.du("HEAD")
        cost.new_chunks = du["commits"][0]["new_stored_bytes"]
        cost.encodings = du["store"]["chunks_by_encoding"]  # the store's counts; made relative in add()

    def add(self, v: Version, spec: Spec | None) -> Cost:
        before = self.du("HEAD")["store"]["chunks_by_encoding"] if spec is not None else {}
        cost = super().add(v, spec)
        cost.encodings = {k: n - before.get(k, 0) for k, n in cost.encodings.items() if n - before.get(k, 0)}
        return cost

    def ingest(self, base: Version, reps: int) -> tuple[Result, Cost]:
        """Store the base ``reps`` times, each in a fresh repository (the last one is kept)."""
        costs: list[Cost] = []

        def measure() -> Proc:
            costs.append(self.add(base, None))
            return costs[-1].proc

        best, times = best_of(reps, self.init, measure)
        return Result("mgit", "add + commit (base)", best, times, store_bytes=self.size()), costs[-1]

    def restore(self, rev: str, label: str, sums: dict[str, str], reps: int) -> Result:
        """Check ``rev`` out into a working tree whose model directory was deleted, ``reps`` times."""
        self.mgit_run("checkout", "--force", rev)
        return checked_best_of(
            "mgit",
            f"checkout {rev} ({label})",
            reps,
            lambda: shutil.rmtree(self.root / MODEL_DIR),
            lambda: self.runner.run([*self.mgit, "checkout", "--force", rev], self.root, timed=True),
            self.root / MODEL_DIR,
            sums,
        )

    def switch_cmds(self, branch: str) -> tuple[list[str], list[str]]:
        return [*self.mgit, "checkout", branch, "--json"], [*self.mgit, "checkout", "--force", "main"]

    @staticmethod
    def switched_how(switch: Result) -> str:
        """How a timed switch wrote the files (its --json): patched in place, or written anew."""
        doc = json.loads(switch.best.output)
        return f"{len(doc['patched'])} of the {len(doc['written'])} files written were patched in place"

    def verify(self, versions: list[Version]) -> dict[str, bool]:
        """Every version checked out into an empty model directory: byte-identical (sha256)?"""
        out = {}
        for v in versions:
            shutil.rmtree(self.root / MODEL_DIR, ignore_errors=True)
            self.mgit_run("checkout", "--force", "main" if v.name == "base" else v.name)
            out[v.name] = sha256_files(self.root / MODEL_DIR) == v.sums
        return out

    def fsck(self) -> str:
        """`mgit fsck`'s last line, or why it failed."""
        try:
            return self.mgit_run("fsck").strip().splitlines()[-1]
        except RuntimeError as exc:
            return f"FAILED: {str(exc).strip().splitlines()[-1]}"


class GitLfsStore(VersionStore):
    name, store_dir = "git + git-lfs", ".git/lfs/objects"

    def init(self) -> None:
        fresh_dir(self.root)
        for cmd in (
            ["git", "init", "-q"],
            ["git", "lfs", "install", "--local"],
            ["git", "lfs", "track", "*.safetensors"],
        ):
            self.runner.run(cmd, self.root)
        self.branch = "main"

    def switch(self, spec: Spec) -> None:
        if spec.branch != self.branch:
            self.runner.run(["git", "checkout", "-q", "-b", spec.branch, "main"], self.root)
            self.branch = spec.branch

    def store_cmds(self, v: Version) -> list[list[str]]:
        return [["git", "add", "-A", "."], ["git", "commit", "-q", "-m", v.name]]

    def after(self, v: Version, cost: Cost) -> None:
        if v.name != "base":
            self.runner.run(["git", "tag", v.name], self.root)

    def switch_cmds(self, branch: str) -> tuple[list[str], list[str]]:
        """`git checkout BRANCH`: its smudge filter writes the files."""
        return ["git", "checkout", "-q", branch], ["git", "checkout", "-q", "-f", "main"]


class DvcStore(VersionStore):
    """DVC has no branches without git: every version is `dvc add`ed into the same cache."""

    name, store_dir = "dvc", ".dvc/cache"

    def __init__(self, root: Path, runner: Runner, dvc: str):
        super().__init__(root, runner)
        self.dvc = dvc

    def init(self) -> None:
        self.runner.run([self.dvc, "init", "--no-scm", "-q"], fresh_dir(self.root))

    def store_cmds(self, v: Version) -> list[list[str]]:
        return [[self.dvc, "add", "-q", MODEL_DIR]]


def store_all(store: VersionStore, versions: list[Version], base_cost: Cost | None = None) -> dict[str, Cost]:
    """Store the base (unless already done: ``base_cost``), then every spec's version in order."""
    costs = {}
    if base_cost is None:
        store.init()
        base_cost = store.add(versions[0], None)
    costs["base"] = base_cost
    specs = {s.name: s for s in SPECS}
    for v in versions[1:]:
        print(f"  {store.name}: {v.name}", flush=True)
        costs[v.name] = store.add(v, specs[v.name])
    return costs


def run_baseline(
    store: VersionStore, versions: list[Version], keep: bool, then: Callable[[], None] | None = None
) -> tuple[dict[str, Cost], int]:
    """Store every version with a baseline tool (and run ``then`` on its repository before it goes):
    (cost per version, the store's size after all of them)."""
    print(f"{store.name} ...", flush=True)
    costs = store_all(store, versions)
    total = store.size()
    if then is not None:
        then()
    if not keep:
        shutil.rmtree(store.root, ignore_errors=True)
    return costs, total


def store_versions_and_checkout(
    c: Contender, base: Version, version: Version, run_dir: Path, runner: Runner, reps: int
) -> list[Result]:
    """Per repetition, in a fresh directory: store the base, then ``version`` over it, then check it out.
    Each step's fastest run is reported; the checkout must reproduce ``version`` byte for byte."""
    runs: list[list[Proc]] = [[], [], []]
    stored: list[int] = [0, 0]
    identical = True
    for _ in range(reps):
        place_model(base.model, fresh_dir(run_dir))  # a fresh directory holding a plain copy of the base
        for cmd in c.setup:
            runner.run(cmd, run_dir)
        for i, v in enumerate((base, version)):
            if i:
                place_model(v.model, run_dir)  # as a training run would overwrite it (untimed)
            runs[i].append(runner.steps(c.store, run_dir))
            stored[i] = disk_usage(run_dir / c.store_dir)
        shutil.rmtree(run_dir / MODEL_DIR)
        runs[2].append(runner.run(c.checkout, run_dir, timed=True))
        identical &= sha256_files(run_dir / MODEL_DIR) == version.sums
    shutil.rmtree(run_dir, ignore_errors=True)
    out = []
    for i, what in enumerate(VERSION_STEPS):
        best = min(runs[i], key=lambda p: p.seconds)
        out.append(Result(c.name, f"{c.store_label}: {what}", best, [p.seconds for p in runs[i]], stored[i]))
    best = min(runs[2], key=lambda p: p.seconds)
    out.append(Result(c.name, c.checkout_label, best, [p.seconds for p in runs[2]], identical=identical))
    return out
