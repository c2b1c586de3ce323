"""Recovering from an interrupted operation: the hints name how HEAD moves, gc keeps the commit
a journal names, and a killed merge -b is finished once its branch is checked out."""

from __future__ import annotations

import pytest
from helpers.models import TINY, commit_model, llama_state_dict, tree_hashes

import mgit.ops.checkout
import mgit.ops.recover
import mgit.ops.workfiles
from mgit import Repository
from mgit.errors import MgitError
from mgit.ops.workfiles import finish_command as _finish_command
from mgit.ops.workfiles import undo_command as _undo_command
from mgit.worktree import journal
from mgit.worktree.journal import Journal

# -- item 1: recovery hints leave HEAD where the operation would --------------------------------


@pytest.mark.parametrize(
    ("head", "finish", "undo"),
    [
        ("branch", "mgit checkout --force b", "mgit checkout --force 222222222222"),
        ("create", "mgit checkout --force b", "mgit checkout --force 222222222222"),
        ("advance", "mgit reset --hard 111111111111", "mgit reset --hard 222222222222"),
        ("detach", "mgit checkout --force 111111111111", "mgit checkout --force 222222222222"),
    ],
)
def test_the_recovery_hint_follows_how_head_moves(head: str, finish: str, undo: str) -> None:
    plan = Journal("checkout", "b", "1" * 40, head=head, branch="b", old_head="2" * 40)
    assert _finish_command(plan) == finish
    assert _undo_command(plan) == undo


# -- item 2: gc keeps the commit an interrupted operation's journal names -----------------------


def test_gc_keeps_a_checkpoint_whose_recovery_failed(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")

    def killed(ctx, plan, index, result):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mgit.ops.workfiles, "complete", killed)
    with pytest.raises(OSError):
        repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="checkpoint")
    plan = journal.load(repo.git_dir)
    assert plan is not None and plan.head == "advance"
    monkeypatch.undo()

    def broken(ctx, plan):
        raise MgitError("disk still full")

    monkeypatch.setattr(mgit.ops.recover, "finish", broken)
    repo.gc(grace_seconds=0)
    assert repo.graph.has(plan.target)
    assert repo.graph.has(repo.graph.read(plan.target).tree.decode())


# -- item 6: a merge -b recovery keeps its journal until the branch is checked out --------------


def test_a_merge_b_recovery_killed_before_its_switch_is_finished_later(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    repo.checkout(create_branch="side")
    merged = commit_model(repo, llama_state_dict(TINY, seed=2), "v2", shards=2)
    want = tree_hashes(repo.root)
    repo.checkout("main")
    journal.save(repo.git_dir, Journal("merge", "m", merged, head="create", branch="m", switch_after=True))
    repo.close()

    def killed(ctx, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mgit.ops.checkout, "switch", killed)
    with Repository(repo.root) as again, pytest.raises(KeyboardInterrupt):
        again.status()
    assert journal.exists(repo.git_dir)
    monkeypatch.undo()
    with Repository(repo.root) as again:
        again.status()
        assert again.refs.current_branch() == "m"
    assert tree_hashes(repo.root) == want
    assert not journal.exists(repo.git_dir)
