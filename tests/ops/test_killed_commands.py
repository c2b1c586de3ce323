"""Crash-safety loose ends of issue 12: remote add/remove hold the repository lock; reset
--hard is journaled like checkout; fsck and gc treat a killed fsck --repair's temporary
object files as leftovers."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import sys
import time
from pathlib import Path

import pytest
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import LockedError
from mgit.worktree import journal

_SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "crash_points.py"


def _driver():
    """benchmarks/crash_points.py (as tests/ops/test_crash_points.py loads it)."""
    if "crash_points" in sys.modules:
        return sys.modules["crash_points"]
    spec = importlib.util.spec_from_file_location("crash_points", _SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules["crash_points"] = module
    spec.loader.exec_module(module)
    return module


def test_remote_add_and_remove_hold_the_lock(tmp_path: Path) -> None:
    """Another process holding the lock (it may be removing stale git lock files, such as
    the config.lock this write would be using) makes remote add/remove wait their turn."""
    repo = Repository.init(tmp_path / "r")
    holder = Repository(tmp_path / "r")
    with holder.lock:
        with pytest.raises(LockedError):
            repo.remote_add("origin", str(tmp_path / "remote"))
        assert repo.remotes() == {}
    repo.remote_add("origin", str(tmp_path / "remote"))
    repo.graph.repo.refs[b"refs/remotes/origin/main"] = b"1" * 40
    with holder.lock:
        with pytest.raises(LockedError):
            repo.remote_remove("origin")
        assert "origin" in repo.remotes()
    repo.remote_remove("origin")
    assert repo.remotes() == {} and b"refs/remotes/origin/main" not in repo.graph.repo.refs


def test_remote_add_while_locked_is_one_line(tmp_path: Path) -> None:
    Repository.init(tmp_path / "r").close()
    with Repository(tmp_path / "r").lock:
        proc = run_mgit("remote", "add", "origin", str(tmp_path / "remote"), cwd=tmp_path / "r")
    assert proc.returncode != 0
    assert proc.stderr.strip().count("\n") == 0 and "another mgit process" in proc.stderr
    assert "Traceback" not in proc.stderr


def _state(root: Path) -> tuple:
    fp = _driver().fingerprint(root)
    return fp["branch"], fp["tips"], fp["index"], fp["work"]


@pytest.mark.slow
def test_killed_reset_hard_is_finished_by_the_next_command(tmp_path: Path) -> None:
    """Killed at any crash point, ``reset --hard`` is all or nothing once the next command
    (status) has run: the old state, or the reset's result with a clean status."""
    cp = _driver()
    scenario = next(s for s in cp.SCENARIOS if s.name == "reset --hard")
    kinds = cp.count_points(scenario, tmp_path / "count")
    before_root, after_root = tmp_path / "before", tmp_path / "after"
    scenario.setup(before_root)
    scenario.setup(after_root)
    assert cp.run_cli(scenario.args, after_root, {}, tmp_path / "after.log") == 0
    before, after = _state(before_root), _state(after_root)
    assert before != after
    journaled = 0
    for n in range(1, len(kinds) + 1):
        root = tmp_path / f"trial-{n}"
        scenario.setup(root)
        assert cp.run_cli(scenario.args, root, {"MGIT_CRASH_AT": f"any:{n}"}, tmp_path / f"{n}.log") == -signal.SIGKILL
        journaled += journal.exists(root / ".mgit")
        with Repository(root) as repo:
            status = repo.status()
        assert not journal.exists(root / ".mgit")
        state = _state(root)
        assert state in (before, after), f"point {n} ({kinds[n - 1]}) left a mix of both"
        assert status.clean, f"point {n}: {status}"
    assert journaled >= 2  # kills between the first working-tree write and the end left a journal


def _leftover(root: Path, age_s: float) -> Path:
    """What a killed ``fsck --repair`` leaves: a loose object's temporary file."""
    sub = next(p for p in (root / ".mgit" / "objects").iterdir() if len(p.name) == 2)
    tmp = sub / f".tmp-{'a' * 38}-{int(age_s)}"
    tmp.write_bytes(b"x\x9c partial")
    then = time.time() - age_s
    os.utime(tmp, (then, then))
    return tmp


def test_gc_removes_a_killed_repairs_temporary_objects_after_the_grace_period(tmp_path: Path) -> None:
    cp = _driver()
    root = tmp_path / "r"
    cp.init(root)
    cp.committed(root, 1, "v1")
    old, young = _leftover(root, 7200), _leftover(root, 10)
    ref_tmp = root / ".mgit" / "refs" / "heads" / "main.tmp-4242"
    ref_tmp.write_text("0" * 40 + "\n")
    os.utime(ref_tmp, (time.time() - 7200,) * 2)
    proc = run_mgit("gc", cwd=root, check=True)
    assert not old.exists() and not ref_tmp.exists() and young.exists()
    assert "removed 2 leftover temporary file(s)" in proc.stderr
    with Repository(root) as repo:
        assert repo.gc(grace_seconds=0).leftovers_removed == 1
    assert not young.exists()


def test_fsck_reports_temporary_objects_as_leftovers_not_damage(tmp_path: Path) -> None:
    cp = _driver()
    root = tmp_path / "r"
    cp.init(root)
    cp.committed(root, 1, "v1")
    tmp = _leftover(root, 10)
    rel = tmp.relative_to(root).as_posix()
    proc = run_mgit("fsck", cwd=root)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"note: leftover temporary file {rel}" in proc.stderr and "`mgit gc` removes it" in proc.stderr
    report = json.loads(run_mgit("fsck", "--json", cwd=root, check=True).stdout)
    assert report["ok"] and report["problems"] == [] and report["leftovers"] == [rel]


def test_status_and_diff_in_a_sparse_checkout_write_no_git_object(tmp_path: Path, monkeypatch) -> None:
    """Read-only commands compute projections in memory: no object is written (without the
    lock, a write could race a lock holder's stale-lock cleanup), clean, touched or modified."""
    from safetensors.numpy import load_file, save_file

    from mgit.graph.objects import Graph

    cp = _driver()
    root = tmp_path / "r"
    cp.setup_checkout(root)
    with Repository(root) as repo:
        repo.checkout("b", include=["layer0.a*"])

    def refuse(self: Graph, obj: object) -> None:
        raise AssertionError(f"a read-only command wrote a git object ({type(obj).__name__})")

    monkeypatch.setattr(Graph, "_add", refuse)
    shard = sorted((root / "model").glob("*.safetensors"))[0]

    def read_everything() -> None:
        with Repository(root) as repo:
            repo.status()
            repo.diff()
            repo.diff(staged=True)
            repo.diff("HEAD~1")

    read_everything()
    st = shard.stat()
    os.utime(shard, (st.st_atime, st.st_mtime + 5))
    read_everything()
    tensors = load_file(str(shard))
    save_file({k: v + 1 for k, v in tensors.items()}, str(shard), metadata={"format": "pt"})
    read_everything()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "limit"), [("push (serve)", None), ("push (serve killed)", 4)])
def test_push_to_mgit_serve_killed_needs_no_repair(name: str, limit: int | None, tmp_path: Path) -> None:
    """The harness's push to a separate `mgit serve` process: the client killed at each of
    its points, the server at its first ones; the rerun pushes, the remote clones and fscks."""
    cp = _driver()
    scenario = next(s for s in cp.SCENARIOS if s.name == name)
    outcome = cp.run_scenario(scenario, tmp_path, limit)
    assert outcome.trials >= 3, outcome.points
    assert outcome.failures == [], "\n".join(outcome.failures)
