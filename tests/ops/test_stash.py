"""Stash entries kept consistent (issue 39 review): dropping an entry when its ref moved under
us, one refusal for local changes whatever path the apply takes, and the advice printed after a
stash apply that conflicts with a moved HEAD."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
from helpers.cli import invoke
from helpers.histories import MODEL
from helpers.histories import changes as _changes
from helpers.histories import tuned as _tuned
from helpers.models import commit_model, touch_later, tree_hashes, write_model
from helpers.models import small_state_dict as _sd
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError, MgitError, RefUpdateError


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


# -- stash --------------------------------------------------------------------------------------


def test_stash_sets_changes_aside_and_pop_restores_them_byte_for_byte(forked):
    repo, _, b = forked
    committed = tree_hashes(repo.root)
    _tuned(repo, seed=5)
    (repo.root / "new.txt").write_text("a new file\n")
    repo.add(["new.txt"])
    (repo.root / "notes.txt").unlink()
    (repo.root / "untracked.txt").write_text("stays\n")
    dirty, dirty_status = tree_hashes(repo.root), _changes(repo)
    out = invoke("stash", cwd=repo.root, check=True).stdout
    assert out == f"Saved working directory and index state WIP on main: {b[:12]} b\n"
    assert tree_hashes(repo.root) == {**committed, "untracked.txt": dirty["untracked.txt"]}
    assert repo.status().untracked == ["untracked.txt"] and not repo.status().staged
    (entry,) = repo.stash_list()
    assert repo.resolve("stash@{0}") == entry.commit and repo.graph.commit(entry.commit).parents[0] == b
    assert invoke("stash", "list", cwd=repo.root, check=True).stdout == f"stash@{{0}}: WIP on main: {b[:12]} b\n"
    repo.gc(grace_seconds=0)  # the stash is a root: nothing of it goes
    popped = invoke("stash", "pop", cwd=repo.root, check=True)
    assert popped.stdout == f"Dropped stash@{{0}} ({entry.commit[:12]})\n"
    assert tree_hashes(repo.root) == dirty and _changes(repo) == dirty_status  # new.txt still added, as git
    assert repo.stash_list() == [] and not (repo.git_dir / "refs" / "stash").exists()


def test_stash_index_restores_the_index_exactly_and_entries_stack(forked):
    repo, _, _ = forked
    (repo.root / "notes.txt").write_text("staged\n")
    repo.add(["notes.txt"])
    (repo.root / "notes.txt").write_text("then edited\n")
    staged_then = {p: ie.entry for p, ie in repo._index().entries.items()}
    first = repo.stash("notes work")
    (repo.root / "model" / "config.json").write_text('{"second": 1}\n')
    second = repo.stash()
    assert [e.commit for e in repo.stash_list()] == [second, first]
    assert repo.stash_list()[1].message == "On main: notes work" and repo.resolve("stash@{1}") == first
    invoke("stash", "apply", "stash@{1}", "--index", cwd=repo.root, check=True)
    assert {p: ie.entry for p, ie in repo._index().entries.items()} == staged_then
    assert (repo.root / "notes.txt").read_text() == "then edited\n" and len(repo.stash_list()) == 2
    repo.reset("HEAD", mode="hard")
    assert invoke("stash", "drop", "1", cwd=repo.root, check=True).stdout == f"Dropped stash@{{1}} ({first[:12]})\n"
    assert [e.commit for e in repo.stash_list()] == [second] and repo.resolve("stash") == second
    repo.stash_drop()
    assert repo.stash_list() == []


def test_stash_pop_onto_a_moved_head(forked):
    """HEAD moved elsewhere: restoring the stash's paths is exact. HEAD changed a path the stash
    changed: the stash is merged onto HEAD three-way (other lines, other tensors), as git's
    stash apply merges; the same lines both ways are a conflict that changes nothing."""
    repo, _, _ = forked
    (repo.root / "notes.txt").write_text("stashed edit\n")
    repo.stash()
    (repo.root / "model" / "config.json").write_text('{"elsewhere": 1}\n')
    repo.add(["model"])
    repo.commit("config only")
    repo.stash_pop()
    assert (repo.root / "notes.txt").read_text() == "stashed edit\n"
    repo.reset("HEAD", mode="hard")

    (repo.root / "notes.txt").write_text("one\ntwo\nthree\nfour\n")
    repo.add(["notes.txt"])
    repo.commit("four lines")
    (repo.root / "notes.txt").write_text("ONE\ntwo\nthree\nfour\n")
    repo.stash()
    (repo.root / "notes.txt").write_text("one\ntwo\nthree\nFOUR\n")
    repo.add(["notes.txt"])
    head = repo.commit("last line")
    repo.stash_pop()
    assert (repo.root / "notes.txt").read_text() == "ONE\ntwo\nthree\nFOUR\n"
    assert repo.refs.head() == head and repo.stash_list() == []
    assert _changes(repo) == ({}, {"notes.txt": "modified"})  # unstaged, as git leaves it
    repo.reset("HEAD", mode="hard")

    (repo.root / "notes.txt").write_text("stashed\ntwo\nthree\nFOUR\n")
    repo.stash()
    (repo.root / "notes.txt").write_text("committed meanwhile\ntwo\nthree\nFOUR\n")
    repo.add(["notes.txt"])
    repo.commit("first line too")
    before = tree_hashes(repo.root)
    proc = invoke("stash", "pop", cwd=repo.root)
    assert proc.returncode == 5 and "CONFLICT" in proc.stdout and "notes.txt" in proc.stdout
    assert tree_hashes(repo.root) == before and len(repo.stash_list()) == 1
    proc = invoke("stash", "apply", "--index", cwd=repo.root)
    assert proc.returncode == 1 and "apply without --index" in proc.stderr


def test_stash_of_one_tensor_merges_onto_a_head_that_changed_another(forked):
    repo, _, _ = forked
    sd = _sd(0)
    stashed = dict(sd, **{"lm_head.weight": sd["lm_head.weight"] + 1})
    write_model(repo.root / "model", stashed)
    touch_later(repo.root / MODEL)
    repo.stash()
    theirs = dict(sd, **{"model.norm.weight": sd["model.norm.weight"] * 2})
    repo.commit_state_dict(theirs, model="model", message="norm")
    repo.stash_pop()
    got = repo.status()
    assert [f.path for f in got.unstaged] == [MODEL]
    want = dict(theirs, **{"lm_head.weight": stashed["lm_head.weight"]})
    loaded = load_file(repo.root / MODEL)
    assert set(loaded) == set(want) and all(torch.equal(loaded[k], want[k]) for k in want)


def test_stash_refusals(repo):
    assert invoke("stash", cwd=repo.root).returncode == 2  # before the first commit
    commit_model(repo, _sd(0), "a")
    assert invoke("stash", cwd=repo.root, check=True).stdout == "No local changes to save\n"
    with pytest.raises(BadInputError, match="no stash entries"):
        repo.stash_pop()
    (repo.root / "model" / "config.json").write_text('{"stashed": 1}\n')
    repo.stash()
    (repo.root / "model" / "config.json").write_text('{"local": 1}\n')
    with pytest.raises(DirtyWorktreeError, match="stash apply would overwrite uncommitted changes in model/config"):
        repo.stash_pop()
    assert (repo.root / "model" / "config.json").read_text() == '{"local": 1}\n' and len(repo.stash_list()) == 1
    with pytest.raises(BadInputError, match=r"stash@\{3\} does not exist"):
        repo.stash_drop(3)
    with pytest.raises(MgitError):
        repo.stash_apply(1)
