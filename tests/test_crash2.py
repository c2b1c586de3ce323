"""Crash-safety loose ends of issue 12: remote add/remove hold the repository lock; reset
--hard is journaled like checkout; fsck and gc treat a killed fsck --repair's temporary
object files as leftovers."""

from __future__ import annotations

import importlib.util
import signal
import sys
from pathlib import Path

import pytest
from conftest import run_mgit

from mgit import Repository
from mgit.errors import LockedError
from mgit.worktree import journal

_SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "crash_points.py"


def _driver():
    """benchmarks/crash_points.py (as tests/test_crash_points.py loads it)."""
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
