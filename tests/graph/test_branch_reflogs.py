"""A branch's reflog when the branch goes (mgit.graph.reflogs, mgit.graph.refs): a deletion or
replacement that loses its compare-and-swap gives the reflog back and says so; a branch whose
reflog `reflog expire` emptied is still restored by the hint the deletion prints; every
reflog line carries the time zone's offset at its time, summer time included, as git's."""

from __future__ import annotations

import time
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
from dulwich.reflog import read_reflog
from helpers.cli import invoke

from mgit import Repository
from mgit.errors import RefUpdateError
from mgit.graph import reflogs, refs


def _commit(repo: Repository, text: str) -> str:
    (repo.root / "f.txt").write_text(text)
    repo.add(["f.txt"])
    return repo.commit(text)


@pytest.fixture
def branched(repo: Repository) -> tuple[Repository, str]:
    """main at one commit, branch ``side`` at the next (made on main, then main moved back)."""
    _commit(repo, "one\n")
    repo.create_branch("side")
    repo.switch("side")
    tip = _commit(repo, "two\n")
    repo.switch("main")
    return repo, tip


def _log(repo: Repository, ref: str) -> Path:
    return repo.git_dir / "logs" / ref


def _graves(repo: Repository) -> list[Path]:
    top = repo.git_dir / "logs" / "refs" / "mgit" / "deleted"
    return [p for p in top.rglob("*") if p.is_file()] if top.exists() else []


def test_a_deletion_that_loses_its_compare_and_swap_keeps_branch_and_reflog(branched, monkeypatch):
    repo, tip = branched
    own = _log(repo, "refs/heads/side").read_bytes()
    monkeypatch.setattr(repo.refs.refs, "remove_if_equals", lambda *a, **k: False)
    with pytest.raises(RefUpdateError, match="branch 'side' moved while it was being deleted; nothing was deleted"):
        repo.delete_branch("side")
    monkeypatch.undo()
    assert repo.branches()["side"] == tip
    assert _log(repo, "refs/heads/side").read_bytes() == own and _graves(repo) == []
    assert repo.resolve("side@{0}") == tip


def test_a_move_logged_while_the_deletion_failed_stays_after_the_branchs_own_entries(branched, monkeypatch):
    repo, tip = branched
    path = _log(repo, "refs/heads/side")
    own = path.read_bytes()
    moved = b"0" * 40 + b" " + tip.encode() + b" A <a@b> 1700000000 +0000\tmoved meanwhile\n"

    def lost(*args: object, **kwargs: object) -> bool:  # another process moved the branch, logging it
        path.write_bytes(moved)
        return False

    monkeypatch.setattr(repo.refs.refs, "remove_if_equals", lost)
    with pytest.raises(RefUpdateError):
        repo.delete_branch("side")
    assert path.read_bytes() == own + moved and _graves(repo) == []


def test_a_forced_rename_that_loses_its_compare_and_swap_gives_both_reflogs_back(branched, monkeypatch):
    repo, tip = branched
    repo.create_branch("other")
    logs = {b: _log(repo, f"refs/heads/{b}").read_bytes() for b in ("side", "other")}

    def lost(*args: object, **kwargs: object) -> None:
        raise RefUpdateError("refs/heads/other moved while this command ran; nothing was changed, run it again")

    monkeypatch.setattr(repo.refs, "_cas", lost)
    with pytest.raises(RefUpdateError):
        repo.rename_branch("side", "other", force=True)
    monkeypatch.undo()
    assert repo.branches()["side"] == tip and repo.branches()["other"] == repo.resolve("main")
    assert {b: _log(repo, f"refs/heads/{b}").read_bytes() for b in ("side", "other")} == logs
    assert _graves(repo) == []


def test_a_branch_whose_reflog_was_expired_is_restored_by_the_printed_hint(branched):
    repo, tip = branched
    invoke("reflog", "expire", "--all", cwd=repo.root, check=True)
    assert _log(repo, "refs/heads/side").read_bytes() == b""
    invoke("branch", "-D", "side", cwd=repo.root, check=True)
    note = invoke("reflog", "show", "side", cwd=repo.root, check=True).stderr
    assert "(`mgit branch side side@{1}` restores it)" in note
    invoke("branch", "side", "side@{1}", cwd=repo.root, check=True)  # the hint, as printed
    assert repo.branches()["side"] == tip


@pytest.fixture
def berlin_summer(monkeypatch: pytest.MonkeyPatch) -> Iterator[int]:
    """Local time in Berlin, and the clock of the refs modules on 1 July 2024 (UTC+2 there)."""
    if not Path("/usr/share/zoneinfo/Europe/Berlin").exists():
        pytest.skip("no time zone database")
    summer = 1719835200
    monkeypatch.setenv("TZ", "Europe/Berlin")
    time.tzset()
    clock = types.SimpleNamespace(time=lambda: summer, timezone=time.timezone, altzone=time.altzone)
    monkeypatch.setattr(refs, "time", clock)
    monkeypatch.setattr(reflogs, "time", clock)
    yield summer
    monkeypatch.undo()
    time.tzset()


def test_reflog_lines_carry_the_summer_time_offset(branched, berlin_summer):
    repo, tip = branched
    repo.switch("side")
    repo.delete_branch("main")
    with open(_log(repo, "HEAD"), "rb") as f:
        head = list(read_reflog(f))[-1]
    (grave,) = _graves(repo)
    with open(grave, "rb") as f:
        deleted = list(read_reflog(f))[-1]
    for entry in (head, deleted):
        assert (entry.timestamp, entry.timezone) == (berlin_summer, 2 * 3600)
