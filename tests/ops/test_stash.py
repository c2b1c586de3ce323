"""Stash entries kept consistent (issue 39 review): dropping an entry when its ref moved under
us, one refusal for local changes whatever path the apply takes, and the advice printed after a
stash apply that conflicts with a moved HEAD."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.models import touch_later

from mgit import Repository
from mgit.errors import DirtyWorktreeError, RefUpdateError


def _write(repo: Repository, rel: str, text: str) -> None:
    path = repo.root / rel
    path.write_text(text)
    touch_later(path)


def _commit(repo: Repository, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        _write(repo, rel, text)
    repo.add(list(files))
    return repo.commit(message)


@pytest.fixture
def stashed(repo: Repository) -> Repository:
    """Three stash entries of notes.txt (s0 oldest) on a commit of notes.txt and other.txt."""
    _commit(repo, {"notes.txt": "one\ntwo\n", "other.txt": "other\n"}, "base")
    for n in range(3):
        _write(repo, "notes.txt", f"s{n}\ntwo\n")
        repo.stash(f"s{n}")
    return repo


def _log(repo: Repository) -> bytes:
    return (repo.git_dir / "logs" / "refs" / "stash").read_bytes()


def test_a_drop_that_loses_the_race_for_the_ref_changes_nothing(stashed: Repository, monkeypatch) -> None:
    """refs/stash moved by someone else: the compare-and-swap fails before the reflog is touched,
    so ref and log still agree on every entry."""
    entries, log = stashed.stash_list(), _log(stashed)
    monkeypatch.setattr(stashed.graph.repo.refs, "set_if_equals", lambda *a, **k: False)
    with pytest.raises(RefUpdateError, match="moved while this command ran"):
        stashed.stash_drop(0)
    assert _log(stashed) == log and stashed.stash_list() == entries
    assert stashed.resolve("stash") == entries[0].commit


def test_a_drop_whose_reflog_cannot_be_written_puts_the_ref_back(stashed: Repository, monkeypatch) -> None:
    entries, log = stashed.stash_list(), _log(stashed)
    replace = os.replace

    def failing(src: str | Path, dst: str | Path) -> None:
        if str(dst).endswith(os.path.join("logs", "refs", "stash")):
            raise OSError(28, "No space left on device", str(dst))
        replace(src, dst)

    monkeypatch.setattr(os, "replace", failing)
    with pytest.raises(OSError, match="No space left"):
        stashed.stash_drop(0)
    monkeypatch.undo()
    assert _log(stashed) == log and stashed.stash_list() == entries
    assert stashed.resolve("stash") == entries[0].commit
    assert not [p for p in (stashed.git_dir / "logs" / "refs").iterdir() if ".tmp-" in p.name]
    stashed.stash_drop(1)  # then a drop in the middle: the log rewritten, the ref unmoved
    assert [e.message for e in stashed.stash_list()] == ["On main: s2", "On main: s0"]
    assert stashed.resolve("stash") == entries[0].commit


def test_a_stash_apply_refuses_a_staged_deletion_it_would_undo(stashed: Repository) -> None:
    """notes.txt deleted and the deletion staged: applying a stash of notes.txt would bring the
    file back and drop the staged deletion; refused, as a merge refuses it, in the same words."""
    stashed.rm(["notes.txt"])
    with pytest.raises(DirtyWorktreeError) as refused:
        stashed.stash_apply(0)
    assert str(refused.value) == (
        "stash apply would overwrite uncommitted changes in notes.txt; commit or discard them first "
        "(nothing changed and the stash is kept)"
    )
    assert not (stashed.root / "notes.txt").exists() and "notes.txt" not in stashed._index().entries


def test_a_stash_apply_onto_a_moved_head_refuses_local_changes_in_one_message(stashed: Repository) -> None:
    """HEAD moved at notes.txt (the stash merges three-way) and at other.txt: local changes in the
    way of either give the same refusal."""
    _commit(stashed, {"notes.txt": "one\ntwo\nthree\n"}, "head moved")
    _write(stashed, "notes.txt", "local\ntwo\nthree\n")
    with pytest.raises(DirtyWorktreeError) as merged:
        stashed.stash_apply(0)
    assert str(merged.value).startswith("stash apply would overwrite uncommitted changes in notes.txt; ")
    assert str(merged.value).endswith("(nothing changed and the stash is kept)")
    assert (stashed.root / "notes.txt").read_text() == "local\ntwo\nthree\n"


def test_a_conflicting_stash_apply_advises_a_branch_not_a_merge_of_the_stash(stashed: Repository) -> None:
    base = stashed.refs.head()
    _commit(stashed, {"notes.txt": "head\ntwo\n"}, "head moved")
    proc = invoke("stash", "apply", cwd=stashed.root)
    assert proc.returncode == 5
    assert proc.stdout.splitlines() == [
        "CONFLICT (text): notes.txt: both sides changed the same lines",
        "Automatic merge failed: nothing changed and the stash is kept; the working tree and index are as they were.",
        "Apply it where it was made, commit it on a branch there, and merge that branch:",
        f"  mgit checkout -b BRANCH {base[:12]} && mgit stash pop stash@{{0}}   (applies as it was made)",
        "  then `mgit add`, `mgit commit`, `mgit checkout main`, and",
        "  mgit merge BRANCH --ours PATTERN | --theirs PATTERN   (fnmatch over PATH or PATH:TENSOR; bare: all)",
    ]
    assert "nothing was committed" not in proc.stdout and "mgit merge stash@" not in proc.stdout
    assert len(stashed.stash_list()) == 3
