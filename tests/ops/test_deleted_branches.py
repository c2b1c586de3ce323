"""A deleted branch's tip stays recoverable until `reflog expire` (issue 39, defect 7): its
reflog is kept under refs/mgit/deleted/<seconds>/<name> (mgit.graph.reflogs), a gc root, and
`reflog show NAME`, `NAME@{1}` and `branch NAME NAME@{1}` find it. Before, `branch -D`
deleted the reflog and `gc --now` dropped a merge commit that was never on HEAD."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import invoke
from helpers.models import commit_model, frozen_finetune, small_state_dict, tree_hashes

from mgit import Repository
from mgit.errors import RevisionError

_sd = small_state_dict


@pytest.fixture
def merged(repo: Repository) -> tuple[Repository, str]:
    """main at a base; expert e1 committed from memory onto its own branch; the merge of e1 into
    the base on branch cand made with --no-checkout: neither commit was ever HEAD."""
    commit_model(repo, _sd(0), "base")
    repo.create_branch("e1")
    repo.commit_state_dict(frozen_finetune(_sd(0), {0}, seed=3), message="e1", branch="e1")
    merge = repo.merge(["e1"], "task_arithmetic", weight=0.5, branch="cand", checkout=False)
    return repo, merge


def test_a_deleted_branchs_merge_commit_survives_gc_until_reflog_expire(merged):
    repo, merge = merged
    tensors = repo.state_dict("cand")
    out = invoke("branch", "-D", "cand", cwd=repo.root, check=True).stdout
    invoke("gc", "--now", cwd=repo.root, check=True)
    assert repo.graph.has(merge) and repo.fsck() == []
    assert out == f"Deleted branch cand (was {merge[:12]}).\n"  # as git says it, the tip to recover
    invoke("branch", "cand", merge, cwd=repo.root, check=True)  # restored, whole
    restored = repo.state_dict("cand")
    assert all(torch.equal(restored[k], v) for k, v in tensors.items())
    repo.delete_branch("cand")
    invoke("reflog", "expire", "--all", cwd=repo.root, check=True)
    invoke("gc", "--now", cwd=repo.root, check=True)
    assert not repo.graph.has(merge)  # expired: then gc reclaims it
    assert not (repo.git_dir / "logs" / "refs" / "mgit" / "deleted").exists()  # emptied kept reflogs go


def test_a_deleted_branch_is_found_by_reflog_show_and_name_at_position(merged):
    repo, merge = merged
    repo.delete_branch("cand")
    assert "cand" not in repo.branches()
    assert repo.reflog_ref("cand").startswith("refs/mgit/deleted/")
    entries = repo.reflog("cand")
    assert entries[0][:2] == (merge, "0" * 40) and entries[0][3] == f"branch: deleted cand (was {merge[:12]})"
    assert entries[1][1] == merge
    assert repo.resolve("cand@{1}") == merge
    with pytest.raises(RevisionError, match="was deleted at that point"):
        repo.resolve("cand@{0}")
    proc = invoke("reflog", "show", "cand", cwd=repo.root, check=True)
    assert proc.stdout.splitlines()[1].startswith(f"{merge[:12]} cand@{{1}} ")
    assert proc.stderr.startswith("branch cand was deleted; its reflog is kept as refs/mgit/deleted/")
    invoke("branch", "cand", "cand@{1}", cwd=repo.root, check=True)  # the recovery the guide names
    assert repo.branches()["cand"] == merge
    assert [m for *_, m in repo.reflog("cand")] == ["branch: created from " + merge[:12]]  # a new history


def test_a_branch_deleted_unmerged_with_d_is_refused_and_kept(merged):
    repo, merge = merged
    refused = invoke("branch", "-d", "cand", cwd=repo.root)
    assert refused.returncode == 2 and "is not fully merged" in refused.stderr
    assert repo.branches()["cand"] == merge and not (repo.git_dir / "logs" / "refs" / "mgit").exists()


def test_force_rename_keeps_the_replaced_branchs_tip(merged):
    """`branch -M e1 cand` replaces cand: its history is kept apart as a deleted branch's."""
    repo, merge = merged
    invoke("branch", "-M", "e1", "cand", cwd=repo.root, check=True)
    invoke("gc", "--now", cwd=repo.root, check=True)
    assert repo.graph.has(merge)
    kept = repo.reflog("cand")
    assert [m for *_, m in kept][0] == "Branch: renamed refs/heads/e1 to refs/heads/cand"
    (grave,) = [p for p in (repo.git_dir / "logs" / "refs" / "mgit" / "deleted").rglob("*") if p.is_file()]
    assert grave.name == "cand" and b"branch: replaced by e1" in grave.read_bytes()


def test_deleted_names_leave_no_directory_in_the_way(repo):
    """A deleted a/b leaves no logs/refs/heads/a directory: a branch a can be made again, and
    deleting a and a/b within one second keeps both reflogs."""
    commit_model(repo, _sd(0), "base")
    head = repo.resolve("HEAD")
    repo.create_branch("a/b")
    repo.delete_branch("a/b")
    repo.create_branch("a")
    repo.delete_branch("a")
    repo.create_branch("a/b")
    repo.delete_branch("a/b")
    kept = sorted(
        p.relative_to(repo.git_dir / "logs").as_posix()
        for p in (repo.git_dir / "logs").rglob("*")
        if p.is_file() and "deleted" in p.parts
    )
    assert len(kept) == 3 and repo.resolve("a@{1}") == head and repo.resolve("a/b@{1}") == head
    assert not (repo.git_dir / "logs" / "refs" / "heads" / "a").exists()
    assert tree_hashes(repo.root)  # the working tree is untouched
