"""Crash points: SIGKILL mgit at every crash point of its writing commands, then check that
the repository needs no manual repair (after SQLite's crash tests).

A crash point is every rename (os.replace / os.rename, dulwich's included), every fsync,
every release of the repository lock, every range an opted-in patch copies into a working
file in place and every working file's new bytes prepared out of sight
(mgit/_crashpoints.py). For each scenario the command runs once uninterrupted, counting its
points (``MGIT_CRASH_LOG``); then, for each point n, a fresh repository is built and the
command runs with ``MGIT_CRASH_AT=any:n``, killing itself there. A trial is ``ok`` when, with no manual step:

- ``status`` works;
- the scenario's rerun (the same command, unless its commit already landed or it took effect) succeeds;
- the result is what the uninterrupted run gave (branch, every branch tip's message and
  files, the index, the working files, a push's remote ref);
- ``fsck`` is clean and every commit the repository held before is still there;
- a pushed-to remote is consistent: a clone of it works and its ``fsck`` is clean.

The push scenarios on ``mgit serve`` run the server as its own ``python -m mgit serve``
process on 127.0.0.1 (a free port, kept across restarts): "push (serve)" kills the pushing
client at each of its points, "push (serve killed)" kills the server at each of its points
(the server restarts before the checks).

Anything else is ``needs repair`` (with the first reason). The command runs in a forked
child of this process (the real CLI code; forking saves the interpreter start), the checks
run here through the Python API.

    python benchmarks/crash_points.py                 # every scenario, every point
    python benchmarks/crash_points.py checkout merge  # some scenarios
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, redirect_stderr
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from safetensors.numpy import load_file, save_file

from mgit import Repository
from mgit.graph.snapshot import read_snapshot

if str(_BENCH_DIR := Path(__file__).resolve().parent) not in sys.path:  # loaded by path (the tests): find harness/
    sys.path.insert(0, str(_BENCH_DIR))
from harness import report  # noqa: E402
from harness.tools import free_port, port_open  # noqa: E402

CHILD_TIMEOUT_S = 120


# -- the repositories ---------------------------------------------------------------------


def write_model(directory: Path, seed: int, shards: int = 1, rows: int = 32, names: str = "ab") -> None:
    """A tiny float32 model (a few KiB): ``shards`` safetensors files of a tensor per letter
    of ``names``, and a config.json."""
    rng = np.random.default_rng(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for k in range(shards):
        tensors = {f"layer{k}.{n}.weight": rng.standard_normal((rows, 16)).astype(np.float32) for n in names}
        name = "model.safetensors" if shards == 1 else f"model-{k + 1:05d}-of-{shards:05d}.safetensors"
        save_file(tensors, str(directory / name), metadata={"format": "pt"})
    (directory / "config.json").write_text(json.dumps({"model_type": "tiny", "seed": seed}))


def committed(root: Path, seed: int, message: str, shards: int = 1, names: str = "ab") -> str:
    write_model(root / "model", seed, shards, names=names)
    with Repository(root) as repo:
        repo.add(["model"])
        return repo.commit(message)


def init(root: Path) -> None:
    Repository.init(root).close()


def setup_add(root: Path) -> None:
    init(root)
    committed(root, 1, "v1")
    write_model(root / "model", 2)


def setup_commit(root: Path) -> None:
    setup_add(root)
    with Repository(root) as repo:
        repo.add(["model"])


def setup_checkout(root: Path) -> None:
    init(root)
    committed(root, 1, "v1", shards=2)
    with Repository(root) as repo:
        repo.checkout(create_branch="b")
    committed(root, 2, "v2", shards=2)
    with Repository(root) as repo:
        repo.checkout("main")


def setup_checkout_few(root: Path) -> None:
    """Two shards of ten tensors; branch b changes one tensor in each: a checkout that writes a
    tenth of each file (what an opted-in ``checkout.inPlace`` would patch in place)."""
    init(root)
    committed(root, 1, "v1", shards=2, names="abcdefghij")
    with Repository(root) as repo:
        repo.checkout(create_branch="b")
    for path in sorted((root / "model").glob("model-*.safetensors")):
        tensors = load_file(str(path))
        first = sorted(tensors)[0]
        tensors[first] = tensors[first] + np.float32(1)
        save_file(tensors, str(path), metadata={"format": "pt"})
    with Repository(root) as repo:
        repo.add(["model"])
        repo.commit("v2")
        repo.checkout("main")


def setup_merge(root: Path, names: str = "ab") -> None:
    init(root)
    committed(root, 1, "base", names=names)
    for branch, seed in (("e1", 2), ("e2", 3)):
        with Repository(root) as repo:
            repo.checkout(create_branch=branch)
        committed(root, seed, branch, names=names)
        with Repository(root) as repo:
            repo.checkout("main")


def setup_branch_merge(root: Path) -> None:
    """main and e1 each change a different tensor of the base's file, e1 its config.json too:
    `merge e1` is a three-way merge (a new tree for the model file, config.json taken from e1)."""
    init(root)
    rng = np.random.default_rng(7)
    tensors = {f"layer0.{n}.weight": rng.standard_normal((32, 16)).astype(np.float32) for n in "abc"}
    model = root / "model"

    def commit(changed: str, config: dict, message: str) -> None:
        model.mkdir(parents=True, exist_ok=True)
        if changed:
            tensors[changed] = tensors[changed] + 1
        save_file(tensors, str(model / "model.safetensors"), metadata={"format": "pt"})
        (model / "config.json").write_text(json.dumps(config))
        with Repository(root) as repo:
            repo.add(["model"])
            repo.commit(message)

    start = dict(tensors)
    commit("", {"model_type": "tiny"}, "base")
    with Repository(root) as repo:
        repo.checkout(create_branch="e1")
    commit("layer0.a.weight", {"model_type": "tiny", "seed": 1}, "e1")
    tensors.clear()
    tensors.update(start)
    with Repository(root) as repo:
        repo.checkout("main")
    commit("layer0.c.weight", {"model_type": "tiny"}, "main")


def setup_merge_wide(root: Path) -> None:
    """Ten tensors: a budget of 10% merges one of them, and the merge, opted in to patching
    (``merge.inPlace``), patches the working file."""
    setup_merge(root, names="abcdefghij")
    with Repository(root) as repo:
        repo.config_set("merge.inPlace", "true")


STASHED_CONFIG = '{"model_type": "tiny", "stashed": true}'


def setup_stash(root: Path) -> None:
    """A stash of a staged model change, an unstaged config.json edit and a new file added:
    `stash apply` brings them back as git does (the model change unstaged, the new file added)."""
    init(root)
    committed(root, 1, "v1")
    write_model(root / "model", 2)
    (root / "notes.txt").write_text("new and added\n")
    with Repository(root) as repo:
        repo.add(["model", "notes.txt"])
    (root / "model" / "config.json").write_text(STASHED_CONFIG)
    with Repository(root) as repo:
        repo.stash()


def stash_applied(root: Path) -> bool:
    return (root / "model" / "config.json").read_text() == STASHED_CONFIG


def setup_gc(root: Path) -> None:
    setup_merge(root)
    with Repository(root) as repo:
        repo.delete_branch("e2")
        repo.reflog_expire(None)


def setup_push(root: Path) -> None:
    init(root)
    committed(root, 1, "v1")
    with Repository(root) as repo:
        repo.remote_add("origin", str(root.parent / "remote"))
        repo.push("origin")
    committed(root, 2, "v2")


class Served:
    """``mgit serve`` in its own process, on a port chosen once per trial so that a restart
    (after the server was killed) keeps the URL the repository's remote names."""

    current: Served | None = None

    def __init__(self, directory: Path):
        self.directory = directory
        self.root = directory / "served"
        self.root.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/remote"
        self.proc: subprocess.Popen | None = None
        self.starts = 0

    def start(self, env: dict[str, str] | None = None) -> None:
        """Start it (``env``: the crash variables) and wait until it answers."""
        self.starts += 1
        log = open(self.directory / f"server-{self.starts}.log", "w")  # noqa: SIM115 - the child holds it
        cmd = [sys.executable, "-m", "mgit", "serve", str(self.root), "--port", str(self.port), "--timeout", "5"]
        self.proc = subprocess.Popen(cmd, env={**os.environ, **(env or {})}, stdout=log, stderr=log)
        log.close()
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and self.proc.poll() is None:
            if port_open(self.port):
                Served.current = self
                return
            time.sleep(0.05)
        raise RuntimeError(f"mgit serve did not start: {(self.directory / f'server-{self.starts}.log').read_text()}")

    def stop(self) -> int | None:
        """Stop it; its exit status (minus the signal) when it had already ended by itself."""
        if self.proc is None:
            return None
        ended = self.proc.poll()
        if ended is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None
        return ended


def setup_push_serve(root: Path) -> None:
    """As setup_push, with the remote on ``mgit serve`` (Served.current)."""
    assert Served.current is not None
    init(root)
    committed(root, 1, "v1")
    with Repository(root) as repo:
        repo.remote_add("origin", Served.current.url)
        repo.push("origin")
    committed(root, 2, "v2")


def setup_repair(root: Path) -> None:
    """A pack with one damaged record, which the working tree can supply again."""
    init(root)
    committed(root, 1, "v1")
    pack = next((root / ".mgit" / "chunks" / "packs").glob("pack-*.pack"))
    data = bytearray(pack.read_bytes())
    data[-5] ^= 0xFF  # inside the last record's payload
    pack.write_bytes(bytes(data))


def setup_repair_object(root: Path) -> None:
    """A damaged loose git object (config.json's blob), which the remote holds again."""
    setup_push(root)
    with Repository(root) as repo:
        oid = repo.snapshot("HEAD~1")["model/config.json"].oid  # v1's: pushed
    path = root / ".mgit" / "objects" / oid[:2] / oid[2:]
    path.chmod(0o644)
    path.write_bytes(b"not a git object")


@dataclass
class Scenario:
    name: str
    setup: Callable[[Path], None]
    args: list[str]
    landed: str | None = None  # message of the commit the command makes: once HEAD has it, no rerun
    preload: str | None = None  # a module to import before forking (torch: seconds saved per trial)
    serve: str | None = None  # the remote is `mgit serve`: "client" (the push is killed) or "server" (it is)
    applied: Callable[[Path], bool] | None = None  # whether the command took effect (no commit): then no rerun


SCENARIOS = [
    Scenario("add", setup_add, ["add", "model"]),
    Scenario("commit", setup_commit, ["commit", "-m", "v2"], landed="v2"),
    Scenario("checkout", setup_checkout, ["checkout", "b"]),
    Scenario("checkout (detached)", setup_checkout, ["checkout", "b~0"]),
    Scenario("checkout (sparse)", setup_checkout, ["checkout", "b", "--include", "layer0.*"]),
    Scenario("checkout (a few tensors)", setup_checkout_few, ["checkout", "b"]),
    Scenario("reset --hard", setup_checkout, ["reset", "--hard", "b"]),
    Scenario(
        "merge",
        setup_merge,
        ["merge", "--method", "linear", "--weights", "0.5", "e1", "e2", "-m", "m"],
        "m",
        "mgit.merge.engine",
    ),
    Scenario(
        "merge -b",
        setup_merge,
        ["merge", "--method", "linear", "--weights", "0.5", "--base", "main", "e1", "e2", "-b", "mb", "-m", "mb"],
        "mb",
        "mgit.merge.engine",
    ),
    Scenario(
        "merge --budget (in place)",
        setup_merge_wide,
        ["merge", "--method", "task_arithmetic", "--weights", "0.5", "--budget", "10%", "e1", "e2", "-m", "mp"],
        "mp",
        "mgit.merge.engine",
    ),
    Scenario("merge (three-way)", setup_branch_merge, ["merge", "e1", "-m", "m3"], "m3"),
    Scenario("stash apply", setup_stash, ["stash", "apply"], applied=stash_applied),
    Scenario("gc", setup_gc, ["gc", "--now"]),
    Scenario("push", setup_push, ["push", "origin", "main"]),
    Scenario("push (serve)", setup_push_serve, ["push", "origin", "main"], serve="client"),
    Scenario("push (serve killed)", setup_push_serve, ["push", "origin", "main"], serve="server"),
    Scenario("fsck --repair", setup_repair, ["fsck", "--repair"]),
    Scenario("fsck --repair (object)", setup_repair_object, ["fsck", "--repair"]),
]
# the subset tests/ops/test_crash_points.py runs
FAST = ("add", "commit", "checkout", "checkout (detached)", "reset --hard", "merge (three-way)", "stash apply")


# -- running the command ------------------------------------------------------------------


def run_cli(args: list[str], cwd: Path, env: dict[str, str], log: Path) -> int:
    """Run ``mgit ARGS`` in a forked child (stdout and stderr to ``log``); its exit status,
    or minus the signal that killed it."""
    sys.stdout.flush()
    sys.stderr.flush()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # fork with threads: the child runs no pool of ours
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        rc = 70
        try:
            fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
            os.dup2(fd, 1)
            os.dup2(fd, 2)
            os.chdir(cwd)
            os.environ.update(env)
            from mgit import _crashpoints
            from mgit.cli import main

            _crashpoints.install()
            rc = main(list(args))
        except BaseException as exc:  # noqa: BLE001 - report anything, exit anyway
            print(f"child failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(rc)
    deadline = time.monotonic() + CHILD_TIMEOUT_S
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            return -signal.SIGKILL
        time.sleep(0.005)


@contextmanager
def served(scenario: Scenario, directory: Path) -> Iterator[Served | None]:
    """The scenario's `mgit serve` (None: it has none), running; stopped at the end."""
    if scenario.serve is None:
        yield None
        return
    server = Served(directory)
    server.start()
    try:
        yield server
    finally:
        server.stop()


def run_command(
    scenario: Scenario, root: Path, server: Served | None, env: dict[str, str], log: Path
) -> tuple[int, int | None]:
    """Run the scenario's command with the crash variables ``env`` in the client or, for a
    "server" scenario, in a server restarted for it (then restarted plain). The client's exit
    status, and the server's when it ended by itself (minus the signal that killed it)."""
    if server is None or scenario.serve == "client":
        return run_cli(scenario.args, root, env, log), None
    server.stop()
    server.start(env)
    rc = run_cli(scenario.args, root, {}, log)
    ended = server.stop()
    server.start()
    return rc, ended


def count_points(scenario: Scenario, work: Path) -> list[str]:
    """The kinds of crash point the command (or the server) passes, in order."""
    root = work / "count" / "repo"
    root.mkdir(parents=True)
    points = work / "count" / "points"
    with served(scenario, work / "count") as server:
        scenario.setup(root)
        rc, _ = run_command(scenario, root, server, {"MGIT_CRASH_LOG": str(points)}, work / "count" / "log")
    if rc != 0:
        raise RuntimeError(
            f"{scenario.name}: the uninterrupted run failed ({rc}): {(work / 'count' / 'log').read_text()}"
        )
    return points.read_text().split() if points.exists() else []


# -- checking -----------------------------------------------------------------------------


def _hash(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def fingerprint(root: Path) -> dict:
    """What an uninterrupted run determines: ids of commits vary with time, so a tip is its
    message, its files and its history's length."""
    with redirect_stderr(io.StringIO()), Repository(root) as repo:
        tips = {}
        for name, commit in sorted(repo.branches().items()):
            info = repo.graph.commit(commit)
            files = {p: e.oid for p, e in read_snapshot(repo.graph, info.tree).items()}
            tips[name] = (info.summary, files, len(repo.log(name)))
        remote = None
        if "origin" in repo.remotes():
            refs = repo._backend("origin").refs()
            remote = {ref: repo.graph.commit(c).summary for ref, c in refs.items()}
        index = {p: ie.entry.oid for p, ie in repo._index().entries.items()}
        work = {
            p.relative_to(root).as_posix(): _hash(p)
            for p in sorted(root.rglob("*"))
            if p.is_file() and ".mgit" not in p.relative_to(root).parts
        }
        return {"branch": repo.refs.current_branch(), "tips": tips, "remote": remote, "index": index, "work": work}


def commits_of(root: Path) -> set[str]:
    with Repository(root) as repo:
        return {
            e.commit.id.decode() for c in repo.branches().values() for e in repo.graph.repo.get_walker([c.encode()])
        }


def _head_summary(root: Path) -> str | None:
    with Repository(root) as repo:
        head = repo.refs.head()
        return repo.graph.commit(head).summary if head else None


def check(scenario: Scenario, root: Path, before: set[str], expected: dict, log: Path) -> str | None:
    """None when the repository needs no manual repair, else the first reason."""
    try:
        with redirect_stderr(io.StringIO()), Repository(root) as repo:
            repo.status()
    except Exception as exc:  # noqa: BLE001 - any failure is a finding
        return f"status fails: {type(exc).__name__}: {exc}"
    landed = scenario.landed is not None and _head_summary(root) == scenario.landed
    if not landed and not (scenario.applied is not None and scenario.applied(root)):
        rc = run_cli(scenario.args, root, {}, log)
        if rc != 0:
            return f"rerun exits {rc}: {log.read_text().strip().splitlines()[-1:]}"
    with redirect_stderr(io.StringIO()), Repository(root) as repo:
        problems = repo.fsck()
    if problems:
        return f"fsck: {problems[0]}"
    broken = check_remote(root, log.parent / "clone")
    if broken:
        return broken
    lost = before - commits_of(root)
    if lost:
        return f"lost {len(lost)} commit(s)"
    got = fingerprint(root)
    if got != expected:
        diff = [k for k in got if got[k] != expected[k]]
        return f"differs from an uninterrupted run in {', '.join(diff)}"
    return None


def check_remote(root: Path, dest: Path) -> str | None:
    """A pushed-to remote is consistent: a clone of it works and its fsck is clean."""
    with Repository(root) as repo:
        url = repo.remotes().get("origin")
    if url is None:
        return None
    try:
        with redirect_stderr(io.StringIO()), Repository.clone(url, dest) as clone:
            problems = clone.fsck()
    except Exception as exc:  # noqa: BLE001 - any failure is a finding
        return f"cloning the remote fails: {type(exc).__name__}: {exc}"
    shutil.rmtree(dest, ignore_errors=True)
    return f"the remote's clone: fsck: {problems[0]}" if problems else None


@dataclass
class Outcome:
    scenario: str
    points: dict[str, int] = field(default_factory=dict)  # kind → how many
    trials: int = 0
    ok: int = 0
    failures: list[str] = field(default_factory=list)  # "point n (kind): reason"


def run_scenario(
    scenario: Scenario, work: Path, limit: int | None = None, after_kill: Callable[[Path], str | None] | None = None
) -> Outcome:
    """Every trial of ``scenario`` (the first ``limit``); ``after_kill``, given the repository
    as the kill left it (before any other command ran), returns what is wrong with it, if anything."""
    if scenario.preload:
        importlib.import_module(scenario.preload)
    kinds = count_points(scenario, work)
    outcome = Outcome(scenario.name, {k: kinds.count(k) for k in sorted(set(kinds))})
    ref = work / "reference" / "repo"
    ref.mkdir(parents=True)
    with served(scenario, work / "reference") as server:
        scenario.setup(ref)
        if run_command(scenario, ref, server, {}, work / "reference" / "log")[0] != 0:
            raise RuntimeError(f"{scenario.name}: the reference run failed")
        expected = fingerprint(ref)
    for n in range(1, (len(kinds) if limit is None else min(limit, len(kinds))) + 1):
        trial = work / f"trial-{n}"
        root = trial / "repo"
        root.mkdir(parents=True)
        with served(scenario, trial) as server:
            scenario.setup(root)
            before = commits_of(root)
            rc, ended = run_command(scenario, root, server, {"MGIT_CRASH_AT": f"any:{n}"}, trial / "log")
            outcome.trials += 1
            killed = ended if scenario.serve == "server" else rc
            if killed != -signal.SIGKILL:
                reason = f"was not killed (exit {killed})"
            else:
                reason = after_kill(root) if after_kill is not None else None
                reason = reason or check(scenario, root, before, expected, trial / "log")
        if reason is None:
            outcome.ok += 1
            shutil.rmtree(trial)
        else:
            outcome.failures.append(f"point {n} ({kinds[n - 1]}): {reason}")
    return outcome


def table(outcomes: list[Outcome]) -> str:
    header = ["command", "crash points (rename/fsync/unlock/write/prepare)", "trials", "ok", "needs repair"]
    rows = []
    for o in outcomes:
        pts = "/".join(str(o.points.get(k, 0)) for k in ("rename", "fsync", "unlock", "write", "prepare"))
        rows.append([o.scenario, pts, o.trials, o.ok, o.trials - o.ok])
    total = sum(o.trials for o in outcomes)
    ok = sum(o.ok for o in outcomes)
    return report.table(header, "lllll", rows) + f"\n| **all** | | {total} | {ok} | {total - ok} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("scenarios", nargs="*", help=f"some of: {', '.join(s.name for s in SCENARIOS)}")
    parser.add_argument("--keep", action="store_true", help="keep the failed trials' repositories")
    args = parser.parse_args(argv)
    chosen = [s for s in SCENARIOS if not args.scenarios or s.name in args.scenarios]
    outcomes = []
    base = Path(tempfile.mkdtemp(prefix="mgit-crash-"))
    try:
        for s in chosen:
            started = time.monotonic()
            o = run_scenario(s, base / s.name.replace(" ", "-"))
            outcomes.append(o)
            print(f"{s.name}: {o.ok}/{o.trials} ok ({time.monotonic() - started:.0f} s)", file=sys.stderr)
            for f in o.failures:
                print(f"  {f}", file=sys.stderr)
    finally:
        if args.keep:
            print(f"trials kept in {base}", file=sys.stderr)
        else:
            shutil.rmtree(base, ignore_errors=True)
    print(table(outcomes))
    return 0 if all(o.ok == o.trials for o in outcomes) else 1


if __name__ == "__main__":
    sys.exit(main())
