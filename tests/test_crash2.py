"""Crash-safety loose ends of issue 12: remote add/remove hold the repository lock; reset
--hard is journaled like checkout; fsck and gc treat a killed fsck --repair's temporary
object files as leftovers."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import run_mgit

from mgit import Repository
from mgit.errors import LockedError


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
