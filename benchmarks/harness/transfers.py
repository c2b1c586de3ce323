"""Push and clone, per tool: mgit to a directory remote or to `mgit serve`, DVC to a directory
remote, each push and clone timed, with the bytes it moved and whether the clone is byte-exact.

Why: sharing a model is where copies multiply. What a tool sends per version pushed, and what a
full or partial clone receives, is measured here the same way for every remote and tool: one
timed command per push (DVC: per version's commit) and per clone, the bytes from mgit's ``--json``
(on the wire) or from DVC's remote and cache on disk.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from harness.runner import MODEL_DIR, Runner, disk_usage, place_model, sha256_files
from harness.tools import free_port, json_output, wait_for_port
from harness.variants import Version


@dataclass
class Step:
    label: str
    seconds: float
    bytes: int | None  # on the wire (mgit) or on disk (DVC)
    detail: str = ""


@dataclass
class Transfers:
    """One tool and remote: every push, the full clone, the partial clone, and which were byte-exact."""

    remote: str
    tool: str
    push: list[Step] = field(default_factory=list)
    clone: Step | None = None
    partial: Step | None = None
    exact: dict[str, bool] = field(default_factory=dict)


def model_exact(root: Path, sums: dict[str, str]) -> bool:
    got = sha256_files(root / MODEL_DIR)
    return all(got.get(name) == digest for name, digest in sums.items())


def mgit_transfers(
    runner: Runner,
    mgit: list[str],
    repo: Path,
    scratch: Path,
    kind: str,
    url: str,
    versions: dict[str, Version],
    branches: Sequence[str],
) -> Transfers:
    """Push ``branches`` of ``repo`` to ``url`` one by one, then clone it whole and partially; the
    clones must hold the base byte for byte (the full one also ``branches[1]`` once checked out)."""
    o = Transfers(kind, "mgit")
    m = [*mgit, "-q"]
    runner.run([*m, "remote", "add", kind, url], repo)
    for branch in branches:
        p = runner.run([*m, "push", kind, branch, "--json"], repo, timed=True)
        t = json_output(p.output)
        o.push.append(Step(branch, p.seconds, t["bytes"], f"{t['chunks']} chunks, {t['present_chunks']} already there"))
    fine_tune = branches[1]
    for label, flags in (("clone", []), ("partial", ["--partial"])):
        dest = scratch / f"{kind}-{label}"
        shutil.rmtree(dest, ignore_errors=True)
        p = runner.run([*m, "clone", *flags, "--json", url, str(dest)], scratch, timed=True)
        t = json_output(p.output)
        step = Step(label, p.seconds, t["bytes"], f"{t['chunks']} chunks")
        setattr(o, "clone" if label == "clone" else "partial", step)
        o.exact[label] = model_exact(dest, versions["base"].sums)
        if label == "clone":  # every version came along: check one fine-tune too (untimed)
            runner.run([*m, "checkout", fine_tune], dest)
            o.exact[f"clone, {fine_tune}"] = model_exact(dest, versions[fine_tune].sums)
    return o


def dvc_transfers(
    runner: Runner, dvc: str, scratch: Path, versions: dict[str, Version], names: Sequence[str]
) -> Transfers:
    """The versions ``names`` as consecutive git commits, each `dvc push`ed to a directory remote; then
    `git clone` + `dvc pull --all-commits` (all versions) and `git clone` + `dvc pull` at the first."""
    o = Transfers("directory", "dvc")
    src, remote = scratch / "dvc-src", scratch / "dvc-remote"
    for d in (src, remote):
        shutil.rmtree(d, ignore_errors=True)
    src.mkdir(parents=True)
    remote.mkdir()
    runner.run(["git", "init", "-q"], src)
    runner.run([dvc, "init", "-q"], src)
    runner.run([dvc, "remote", "add", "-d", "storage", str(remote)], src)
    runner.run(["git", "commit", "-qam", "dvc init"], src)
    for name in names:  # consecutive commits: DVC keeps versions in git history
        place_model(versions[name].model, src)
        runner.run([dvc, "add", "-q", MODEL_DIR], src)
        runner.run(["git", "add", f"{MODEL_DIR}.dvc", ".gitignore"], src)
        runner.run(["git", "commit", "-qm", name], src)
        before = disk_usage(remote)
        p = runner.run([dvc, "push", "-q"], src, timed=True)
        o.push.append(Step(name, p.seconds, disk_usage(remote) - before, "remote growth on disk"))
    runner.run(["git", "checkout", "-q", f"HEAD~{len(names) - 1}"], src)  # the base, as mgit's clones check out
    runner.run(["git", "branch", "-f", "base-version"], src)
    runner.run(["git", "checkout", "-q", "base-version"], src)
    for label, pull in (("clone", [dvc, "pull", "-q", "--all-commits"]), ("partial", [dvc, "pull", "-q"])):
        dest = scratch / f"dvc-{label}"
        shutil.rmtree(dest, ignore_errors=True)
        p = runner.steps([["git", "clone", "-q", str(src), str(dest)], ["true"]], scratch)
        q = runner.run(pull, dest, timed=True)
        cache = disk_usage(dest / ".dvc" / "cache")
        step = Step(label, p.seconds + q.seconds, cache, "clone cache on disk")
        setattr(o, "clone" if label == "clone" else "partial", step)
        o.exact[label] = model_exact(dest, versions[names[0]].sums)
    return o


@contextmanager
def mgit_serve(mgit: list[str], root: Path, runner: Runner) -> Iterator[int]:
    """`mgit serve ROOT` on a free port of 127.0.0.1 (its port), stopped when the block ends."""
    port = free_port()
    server = subprocess.Popen(
        [*mgit, "serve", str(root), "--port", str(port)],
        env=runner.env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port(port)
        yield port
    finally:
        server.terminate()
        server.wait(timeout=30)
