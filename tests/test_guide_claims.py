"""What docs/guide.md says is kept, recoverable or refused, each claim a test named after it
(issue 39: a claim that no test checks can turn false unseen, as "a deleted branch keeps its
reflog" did). Claims tested elsewhere are listed at the end, with their tests."""

from __future__ import annotations

import pytest
from helpers.cli import invoke
from helpers.models import (
    commit_model,
    frozen_finetune,
    small_state_dict,
    touch_later,
    tree_hashes,
    write_model,
)

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError

_sd = small_state_dict


@pytest.fixture
def merged(repo: Repository) -> tuple[Repository, str, str]:
    """main at base, then a merge of expert e1 (made on its branch from memory) onto main."""
    base = commit_model(repo, _sd(0), "base")
    repo.create_branch("e1")
    repo.commit_state_dict(frozen_finetune(_sd(0), {0}, seed=3), message="e1", branch="e1")
    return repo, base, repo.merge(["e1"], "task_arithmetic", weight=0.5)


def test_reset_hard_head_1_undoes_a_merge_which_stays_reachable_until_reflog_expire_and_gc(merged):
    """Guide, Reset: "the merge commit stays reachable from the reflog until `mgit reflog
    expire` and `gc`"; "`mgit reset --hard 3f2a9c1` and back again: `mgit reflog` shows where
    the branch was"."""
    repo, base, merge = merged
    merged_files = tree_hashes(repo.root)
    invoke("reset", "--hard", "HEAD^1", cwd=repo.root, check=True)
    repo.delete_branch("e1")  # nothing but reflogs names the merge now
    invoke("gc", "--now", cwd=repo.root, check=True)
    shown = invoke("reflog", cwd=repo.root, check=True).stdout.splitlines()
    assert shown[0].startswith(f"{base[:12]} HEAD@{{0}} ") and shown[1].startswith(f"{merge[:12]} HEAD@{{1}} ")
    invoke("reset", "--hard", merge[:12], cwd=repo.root, check=True)
    assert repo.refs.head() == merge and tree_hashes(repo.root) == merged_files
    invoke("reset", "--hard", "HEAD^1", cwd=repo.root, check=True)
    invoke("reflog", "expire", "--all", cwd=repo.root, check=True)
    invoke("gc", "--now", cwd=repo.root, check=True)
    assert not repo.graph.has(merge)
    invoke("fsck", cwd=repo.root, check=True)


def test_reset_hard_main_at_1_undoes_a_reset(merged):
    """Guide, Revisions: "`mgit reset --hard main@{1}` undoes a reset"."""
    repo, base, merge = merged
    files = tree_hashes(repo.root)
    repo.reset("HEAD~1", mode="hard")
    assert repo.refs.head() == base
    invoke("reset", "--hard", "main@{1}", cwd=repo.root, check=True)
    assert repo.refs.head() == merge and tree_hashes(repo.root) == files


def test_reflog_expire_older_than_keeps_a_recently_deleted_branch(merged):
    """Guide, Storage: "`mgit reflog expire --older-than 30` … forgets entries" older than that:
    a branch deleted today keeps its commits through gc."""
    repo, _, _ = merged
    tip = repo.delete_branch("e1")
    invoke("reflog", "expire", "--older-than", "30", cwd=repo.root, check=True)
    invoke("gc", "--now", cwd=repo.root, check=True)
    assert repo.graph.has(tip) and repo.resolve("e1@{1}") == tip


def test_switching_refuses_an_untracked_file_in_the_way_and_force_discards_it(repo):
    """Guide, Branches: "Switching refuses to overwrite … an untracked file in the way, naming
    the files; `--force` discards them"."""
    commit_model(repo, _sd(0), "a")
    repo.checkout(create_branch="side")
    (repo.root / "notes.txt").write_text("side's\n")
    repo.add(["notes.txt"])
    repo.commit("notes")
    repo.checkout("main")
    (repo.root / "notes.txt").write_text("mine, untracked\n")
    refused = invoke("checkout", "side", cwd=repo.root)
    assert refused.returncode == 4 and "notes.txt" in refused.stderr
    assert (repo.root / "notes.txt").read_text() == "mine, untracked\n" and repo.refs.current_branch() == "main"
    invoke("checkout", "--force", "side", cwd=repo.root, check=True)
    assert (repo.root / "notes.txt").read_text() == "side's\n"


def test_switching_carries_local_changes_to_files_it_does_not_touch(repo):
    """Guide, Branches: "Local changes to files the switch does not touch are carried over, as in git"."""
    commit_model(repo, _sd(0), "a")
    repo.create_branch("third")
    repo.commit_state_dict(_sd(9), message="another model", branch="third")
    repo.checkout(create_branch="side")
    (repo.root / "notes.txt").write_text("side's\n")
    repo.add(["notes.txt"])
    repo.commit("notes")
    repo.checkout("main")
    write_model(repo.root / "model", frozen_finetune(_sd(0), {0}, seed=4))
    touch_later(repo.root / "model" / "model.safetensors")
    edited = tree_hashes(repo.root)["model/model.safetensors"]
    repo.checkout("side")
    assert tree_hashes(repo.root)["model/model.safetensors"] == edited
    assert [f.path for f in repo.status().unstaged] == ["model/model.safetensors"]
    with pytest.raises(DirtyWorktreeError, match="model/model.safetensors"):  # a switch that touches it
        repo.checkout("third")
    assert tree_hashes(repo.root)["model/model.safetensors"] == edited


def test_fetch_never_clobbers_an_existing_local_tag(repo, tmp_path):
    """Guide, Remotes: a remote's tags "become local tags unless one of that name exists (then
    `! [rejected] … (would clobber existing tag)`)"."""
    a = commit_model(repo, _sd(0), "a")
    url = str(tmp_path / "remote.mgit")
    repo.remote_add("origin", url)
    repo.tag("v1")
    repo.push("origin", "v1")
    repo.push()
    with Repository.clone(url, tmp_path / "clone") as clone:
        b = commit_model(clone, _sd(1), "b")
        clone.delete_tag("v1")
        clone.tag("v1", b)
        proc = invoke("fetch", cwd=clone.root, check=True)
        assert clone.tags()["v1"] == b != a
        assert " ! [rejected]        v1 -> v1  (would clobber existing tag)" in proc.stderr.splitlines()


def test_add_refuses_an_ignored_file_named_but_stages_a_tracked_one(repo):
    """Guide, .mgitignore: "Naming an ignored file explicitly in `mgit add` is refused" — an
    untracked one; a tracked file is never ignored, as in git (stash stages every tracked file)."""
    commit_model(repo, _sd(0), "a")
    (repo.root / ".mgitignore").write_text("*.json\n")
    (repo.root / "extra.json").write_text("{}\n")
    with pytest.raises(BadInputError, match="extra.json is ignored by .mgitignore"):
        repo.add(["extra.json"])
    (repo.root / "model" / "config.json").write_text('{"tracked": true}\n')
    repo.add(["model/config.json"])
    assert [f.path for f in repo.status().staged] == ["model/config.json"]


# Claims checked by other tests:
# - "a deleted branch keeps its reflog until `reflog expire`" (and its commits through gc):
#   tests/ops/test_deleted_branches.py
# - `branch -d` refuses a branch neither HEAD nor its upstream has: tests/ops/test_refs.py::
#   test_branch_delete_refuses_an_unmerged_branch, test_branch_delete_accepts_a_branch_merged_into_its_upstream
# - `reset` without --hard never drops staged tensors: tests/ops/test_reset.py::
#   test_reset_mixed_refuses_to_drop_staged_tensors_no_commit_holds
# - `reset -- PATH` moves neither HEAD nor the branch nor a working file: tests/ops/test_reset.py::
#   test_reset_paths_unstages_and_leaves_files_and_head
# - gc keeps what a reflog reaches, and nothing younger than the grace period is touched:
#   tests/ops/test_maintain.py::test_gc_keeps_what_only_a_reflog_reaches,
#   test_gc_after_a_crash_frees_orphans_and_keeps_every_commit
# - an interrupted gc loses nothing: tests/ops/test_maintain.py::
#   test_gc_interrupted_after_writing_the_new_pack_loses_nothing
# - gc refuses while a ref is damaged: tests/maintenance/test_fsck_damage.py::test_gc_refuses_while_a_ref_is_damaged
# - switching refuses uncommitted changes, --force discards them: tests/ops/test_round_trips.py::
#   test_checkout_refuses_to_overwrite_uncommitted_changes
# - tags keep no reflog: tests/ops/test_reflogs.py::test_reflog_of_a_tag_says_tags_keep_none
# - commit_state_dict refuses to overwrite uncommitted changes: tests/ops/test_stage.py::
#   test_commit_state_dict_refuses_to_overwrite_uncommitted_changes
# - a stash is kept (gc root) until dropped; pop refuses a moved HEAD and keeps it:
#   tests/ops/test_stash.py
