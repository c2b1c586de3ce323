"""The commands around git's merge for models (issue 39, defect 2): fast-forwards and "Already
up to date", --no-ff / --ff-only, `merge-base`, `pull` on diverged branches (it merges; --ff-only
refuses, naming a command that works), `revert` (the inverse change, three-way) and a merge
killed half way (finished by the next command, as checkout's journal does)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch
from helpers.cli import invoke
from helpers.models import LlamaSpec, commit_model, llama_state_dict, sha256, tree_hashes
from helpers.run import run_mgit
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError, MergeConflictError, MgitError, NonFastForwardError
from mgit.merge.threeway.snapshots import FileChange
from mgit.worktree import journal

SPEC = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)
Q0 = "model.layers.0.self_attn.q_proj.weight"
UP1 = "model.layers.1.mlp.up_proj.weight"
FILE = "model/model.safetensors"


@pytest.fixture
def base() -> dict:
    return llama_state_dict(SPEC, seed=0, dtype=torch.float32)


def _with(sd: dict, name: str, offset: float) -> dict:
    return {**sd, name: sd[name] + offset}


def _messages(repo: Repository, ref: str) -> list[str]:
    return [message for _, _, _, message in repo.reflog(ref)]


# -- fast-forward, up to date, --no-ff, --ff-only, merge-base ---------------------------------


def test_fast_forward_and_already_up_to_date(repo, base):
    first = commit_model(repo, base, "base")
    repo.checkout(create_branch="feat")
    tip = commit_model(repo, _with(base, Q0, 1.0), "feat")
    repo.checkout("main")
    repo.close()
    got = invoke("merge", "feat", cwd=repo.root)
    assert got.exit_code == 0 and got.stdout.startswith(f"Updating {first[:7]}..{tip[:7]}\nFast-forward\n")
    with Repository(repo.root) as again:
        assert again.refs.head() == tip and again.refs.current_branch() == "main"
        assert _messages(again, "main")[0] == "merge feat: Fast-forward"
        assert torch.equal(load_file(again.root / FILE)[Q0], base[Q0] + 1.0)
    assert invoke("merge", "feat", cwd=repo.root).stdout == "Already up to date.\n"
    doc = json.loads(invoke("merge", "main~1", "--json", cwd=repo.root).stdout)
    assert doc["schema"] == "mgit.branch-merge/2" and doc["kind"] == "up-to-date" and doc["commit"] is None


def test_no_ff_makes_a_merge_commit_and_ff_only_refuses_diverged_branches(repo, base):
    first = commit_model(repo, base, "base")
    repo.checkout(create_branch="feat")
    tip = commit_model(repo, _with(base, Q0, 1.0), "feat")
    repo.checkout("main")
    result = repo.merge_branch("feat", ff="no")
    assert result.kind == "merged" and repo.graph.commit(repo.refs.head()).parents == (first, tip)
    assert repo.snapshot()[FILE] == repo.snapshot("feat")[FILE]
    repo.checkout(create_branch="other")
    repo.reset("main~1", mode="hard")
    commit_model(repo, _with(base, UP1, 1.0), "other")
    with pytest.raises(NonFastForwardError, match="not possible to fast-forward"):
        repo.merge_branch("feat", ff="only")
    repo.close()
    assert invoke("merge", "feat", "--ff-only", cwd=repo.root).exit_code == 1


def test_merge_base_and_is_ancestor_from_the_cli(repo, base):
    first = commit_model(repo, base, "base")
    repo.checkout(create_branch="feat")
    commit_model(repo, _with(base, Q0, 1.0), "feat")
    repo.checkout("main")
    commit_model(repo, _with(base, UP1, 1.0), "main")
    assert repo.merge_base("main", "feat") == first and repo.merge_bases(["main", "feat"]) == [first]
    assert repo.is_ancestor("main~1", "feat") and not repo.is_ancestor("main", "feat")
    repo.close()
    assert invoke("merge-base", "main", "feat", cwd=repo.root).stdout == first + "\n"
    assert invoke("merge-base", "--all", "main", "feat", cwd=repo.root).stdout == first + "\n"
    assert invoke("merge-base", "--is-ancestor", "main~1", "feat", cwd=repo.root).exit_code == 0
    yes_no = invoke("merge-base", "--is-ancestor", "main", "feat", cwd=repo.root)
    assert yes_no.exit_code == 1 and yes_no.stdout == yes_no.stderr == ""
    assert invoke("merge-base", "main", cwd=repo.root).exit_code == 2


def test_unrelated_histories_are_refused(repo, base):
    commit_model(repo, base, "base")
    tree = repo.graph.commit(repo.refs.head()).tree
    lonely = repo.graph.put_commit(tree, [], "lonely", repo.identity(), repo.identity())
    repo.refs.create_branch("lonely", lonely)
    assert repo.merge_base("main", "lonely") is None
    with pytest.raises(BadInputError, match="unrelated histories"):
        repo.merge_branch("lonely")


# -- pull -----------------------------------------------------------------------------------


@pytest.fixture
def diverged(repo, base, tmp_path: Path) -> tuple[Repository, Repository]:
    """origin's main and a clone's main each changed a different tensor since the clone."""
    commit_model(repo, base, "base")
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    clone = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "clone")
    commit_model(repo, _with(base, Q0, 1.0), "upstream")
    repo.push()
    commit_model(clone, _with(base, UP1, 2.0), "local")
    yield repo, clone
    clone.close()


def test_pull_merges_diverged_branches_keeping_the_local_change(diverged, base):
    """Before: pull stopped and advised `mgit merge origin/main`, which failed (give --method);
    the completion with --method reverted the local change. Now pull merges three-way."""
    upstream, clone = diverged
    local = clone.refs.head()
    clone.close()
    got = invoke("pull", cwd=clone.root)
    assert got.exit_code == 0, got.stderr
    assert got.stdout == f"Merge made by the 'three-way' strategy.\n {FILE} | merged per tensor: 1 from origin/main\n"
    with Repository(clone.root) as again:
        head = again.graph.commit(again.refs.head())
        assert head.parents == (local, upstream.refs.head())
        assert head.message.startswith("Merge branch 'main' of ")
        assert _messages(again, "main")[0] == "pull: Merge made by the 'three-way' strategy."
        merged = load_file(again.root / FILE)
        assert torch.equal(merged[UP1], base[UP1] + 2.0) and torch.equal(merged[Q0], base[Q0] + 1.0)
        again.push()  # the merge goes back up: a fast-forward of origin's main
    assert upstream.fetch().refs["refs/heads/main"][1] == head.id


def test_pull_ff_only_refuses_and_names_a_merge_that_works(diverged):
    _, clone = diverged
    local = clone.refs.head()
    with pytest.raises(NonFastForwardError, match=r"`mgit merge origin/main`"):
        clone.pull(ff_only=True)
    assert clone.refs.head() == local  # fetched, nothing merged
    clone.close()
    refused = invoke("pull", "--ff-only", cwd=clone.root)
    assert refused.exit_code == 1 and "mgit merge origin/main" in refused.stderr
    advised = invoke("merge", "origin/main", cwd=clone.root)  # the advice works as given
    assert advised.exit_code == 0, advised.stderr
    with Repository(clone.root) as again:
        assert again.graph.commit(again.refs.head()).summary == "Merge remote-tracking branch 'origin/main'"


def test_pull_with_conflicts_keeps_the_fetch_and_merges_nothing(diverged, base):
    upstream, clone = diverged
    commit_model(upstream, _with(base, UP1, -1.0), "upstream too")
    upstream.push()
    local, files = clone.refs.head(), tree_hashes(clone.root)
    with pytest.raises(MergeConflictError) as caught:
        clone.pull()
    assert [c.tensor for c in caught.value.report.conflicts] == [UP1]
    assert clone.refs.head() == local and tree_hashes(clone.root) == files
    assert clone.resolve("origin/main") == upstream.refs.head()  # the fetch is kept
    clone.close()
    got = invoke("pull", cwd=clone.root)
    assert got.exit_code == 5 and "CONFLICT (content)" in got.stdout and "mgit merge origin/main" in got.stdout


# -- revert ---------------------------------------------------------------------------------


def test_revert_restores_the_old_bytes_exactly(repo, base):
    commit_model(repo, base, "v1")
    v1_file = sha256(repo.root / FILE)
    v1_entry = repo.snapshot()[FILE]
    changed = commit_model(repo, _with(base, Q0, 1.0), "tune q0")
    repo.close()
    got = invoke("revert", "HEAD", cwd=repo.root)
    assert got.exit_code == 0, got.stderr
    with Repository(repo.root) as again:
        head = again.graph.commit(again.refs.head())
        assert head.message == f'Revert "tune q0"\n\nThis reverts commit {changed}.'
        assert head.parents == (changed,) and _messages(again, "main")[0] == 'revert: Revert "tune q0"'
        assert again.snapshot()[FILE] == v1_entry and sha256(again.root / FILE) == v1_file
        st = again.status()
        assert not (st.staged or st.unstaged)


def test_revert_of_an_older_change_keeps_the_later_ones(repo, base):
    commit_model(repo, base, "v1")
    commit_model(repo, _with(base, Q0, 1.0), "tune q0")
    later = _with(_with(base, Q0, 1.0), UP1, 3.0)
    commit_model(repo, later, "tune up1")
    result = repo.revert("HEAD~1")
    assert result.kind == "reverted" and result.changed == {FILE: FileChange("merged", {Q0: "theirs"})}
    got = load_file(repo.root / FILE)
    assert torch.equal(got[Q0], base[Q0]) and torch.equal(got[UP1], later[UP1])
    with pytest.raises(MgitError, match="nothing to commit"):
        repo.revert("HEAD~2")  # "tune q0" again: its change is gone already
    commit_model(repo, _with(base, Q0, 5.0), "retune q0")  # q0 changed again since
    with pytest.raises(MergeConflictError) as caught:
        repo.revert("HEAD~3")
    assert [c.tensor for c in caught.value.report.conflicts] == [Q0]


def test_revert_of_a_merge_needs_a_mainline(repo, base):
    commit_model(repo, base, "base")
    repo.checkout(create_branch="feat")
    commit_model(repo, _with(base, Q0, 1.0), "feat")
    repo.checkout("main")
    commit_model(repo, _with(base, UP1, 1.0), "main")
    repo.merge_branch("feat")
    merge = repo.refs.head()
    with pytest.raises(BadInputError, match="is a merge but no -m option was given"):
        repo.revert("HEAD")
    repo.revert("HEAD", mainline=1)
    got = load_file(repo.root / FILE)
    assert torch.equal(got[Q0], base[Q0]) and torch.equal(got[UP1], base[UP1] + 1.0)
    assert f"This reverts commit {merge}, reversing\nchanges made to " in repo.graph.commit(repo.refs.head()).message
    repo.close()
    bad = invoke("revert", "HEAD~2", "-m", "1", cwd=repo.root)
    assert bad.exit_code == 2 and "is not a merge" in bad.stderr


# -- crash safety ---------------------------------------------------------------------------


def _crash_points():
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import crash_points
    finally:
        sys.path.pop(0)
    return crash_points


def test_a_merge_killed_while_writing_the_working_tree_is_finished_by_the_next_command(tmp_path: Path):
    """SIGKILL at each crash point after the journal is written (the branch moved, the merged
    model file being put in place): the next command finishes the merge from the journal, and
    the result is an uninterrupted run's. (benchmarks/crash_points.py "merge (three-way)" also
    kills it before the journal, where nothing is left to finish.)"""
    crash_points = _crash_points()
    scenario = next(s for s in crash_points.SCENARIOS if s.name == "merge (three-way)")
    points = len(crash_points.count_points(scenario, tmp_path))
    reference = tmp_path / "reference"
    reference.mkdir()
    scenario.setup(reference)
    assert crash_points.run_cli(scenario.args, reference, {}, tmp_path / "ref.log") == 0
    finished, mid_write = 0, 0
    for point in range(1, points + 1):
        root = tmp_path / f"killed-{point}"
        root.mkdir()
        scenario.setup(root)
        env = {"MGIT_CRASH_AT": f"any:{point}"}
        assert crash_points.run_cli(scenario.args, root, env, tmp_path / f"{point}.log") == -9
        if not journal.exists(root / ".mgit"):
            continue
        mid_write += not (root / "model" / "model.safetensors").exists()  # between delete and rename
        status = run_mgit("status", cwd=root)
        assert status.returncode == 0 and "finishing the interrupted merge of e1" in status.stderr
        assert not journal.exists(root / ".mgit")
        assert crash_points.fingerprint(root) == crash_points.fingerprint(reference)
        with Repository(root) as repo:
            assert repo.graph.commit(repo.refs.head()).summary == "m3" and repo.fsck() == []
        finished += 1
    assert finished >= 3 and mid_write >= 1
