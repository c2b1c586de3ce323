"""Where a branch merge stands in history and in the working tree (issue 39, review of the
three-way merge): ancestry under clock skew, `merge REV --method` on a revision HEAD already
holds, staged changes, a directory replaced by a file and back, a detached HEAD, an unborn
branch, the revert of a root commit, pull's report, and merges killed mid-way (revert, pull)."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from unittest import mock

import pytest
import torch
from helpers.branches import blob, commit_files, commit_snapshot, diverge, put
from helpers.cli import invoke
from helpers.models import tree_hashes
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError
from mgit.graph import objects
from mgit.worktree import journal

W = torch.zeros(64)


def test_ancestry_follows_parents_whatever_the_commit_dates(repo):
    """A commit dated before its parent (another machine's clock): before, ancestry stopped at
    it, so a fast-forward became a merge commit, --ff-only refused, and merging the older side
    back made an empty merge commit."""
    a = commit_files(repo, {"a.txt": "a\n"}, "A")
    now = time.time()
    with mock.patch.object(objects.time, "time", lambda: now - 5000):
        b = commit_snapshot(repo, a, {"b.txt": blob(repo, b"b\n")}, "B, on a slow clock")
    c = commit_snapshot(repo, b, {"c.txt": blob(repo, b"c\n")}, "C")
    repo.create_branch("feat", c)
    assert repo.is_ancestor("main", "feat") and not repo.is_ancestor("feat", "main")
    assert repo.merge_branch("feat", ff="only").kind == "fast-forward" and repo.refs.head() == c
    assert (repo.root / "c.txt").read_text() == "c\n"
    repo.create_branch("old", a)
    assert repo.merge_branch("old").kind == "up-to-date" and repo.refs.head() == c
    repo.close()
    assert invoke("merge-base", "--is-ancestor", b, "feat", cwd=repo.root).exit_code == 0
    assert invoke("branch", "-d", "old", cwd=repo.root).exit_code == 0  # merged: HEAD reaches it


def test_merge_with_a_method_of_a_revision_head_holds_changes_nothing(repo):
    """`mgit merge feat --method ...` with feat already merged: before, a model merge over HEAD
    that undid ours' change; now git's merge: already up to date. In Python, a model merge of
    such a revision over HEAD is refused unless the base is named."""
    diverge(repo, {"m.safetensors": {"x": W}}, {"m.safetensors": {"x": W + 3}}, {"m.safetensors": {"x": W + 1}})
    repo.close()
    first = invoke("merge", "feat", "--method", "task_arithmetic", cwd=repo.root)
    assert first.exit_code == 0 and first.stdout.startswith("Merge made by the 'three-way' strategy.")
    merged = load_file(repo.root / "m.safetensors")["x"]
    assert torch.equal(merged, W + 4)  # base + both changes
    again = invoke("merge", "feat", "--method", "task_arithmetic", "--weights", "1", cwd=repo.root)
    assert again.exit_code == 0 and again.stdout == "Already up to date.\n"
    assert torch.equal(load_file(repo.root / "m.safetensors")["x"], merged)
    with Repository(repo.root) as again_repo:
        head = again_repo.refs.head()
        with pytest.raises(BadInputError, match="feat is not ahead of HEAD.*--base HEAD"):
            again_repo.merge(["feat"], "task_arithmetic")
        assert again_repo.refs.head() == head and not again_repo.is_branch_merge(["feat", "main"])
        again_repo.merge(["feat"], "task_arithmetic", base="HEAD", weight=1.0)  # named: a model merge, as asked
        assert torch.equal(load_file(again_repo.root / "m.safetensors")["x"], W + 1)


def test_staged_changes_refuse_a_three_way_merge_and_a_revert(repo):
    """Before: the merge commit was made without the staged change, which stayed staged."""
    diverge(repo, {"a.txt": "a\n", "s.txt": "s\n"}, {"c.txt": "c\n"}, {"b.txt": "b\n"})
    put(repo.root, "s.txt", "staged\n")
    repo.add(["s.txt"])
    head, files = repo.refs.head(), tree_hashes(repo.root)
    with pytest.raises(DirtyWorktreeError, match="merge needs the index to match HEAD, and s.txt has staged"):
        repo.merge_branch("feat")
    with pytest.raises(DirtyWorktreeError, match="revert needs the index to match HEAD"):
        repo.revert("HEAD")
    assert repo.refs.head() == head and tree_hashes(repo.root) == files
    assert [f.path for f in repo.status().staged] == ["s.txt"]
    repo.close()
    assert invoke("merge", "feat", cwd=repo.root).exit_code == 4


def test_a_fast_forward_keeps_staged_changes_elsewhere(repo):
    commit_files(repo, {"a.txt": "a\n", "s.txt": "s\n"}, "base")
    repo.checkout(create_branch="feat")
    commit_files(repo, {"b.txt": "b\n"}, "feat")
    repo.checkout("main")
    put(repo.root, "s.txt", "staged\n")
    repo.add(["s.txt"])
    assert repo.merge_branch("feat").kind == "fast-forward"
    assert [f.path for f in repo.status().staged] == ["s.txt"] and (repo.root / "b.txt").exists()


def _replaced(repo: Repository, how: str, mode: str) -> str:
    """feat turns directory ``a`` into a file ``a`` (``how`` "dir->file") or the reverse; main
    changes c.txt too when ``mode`` is "3way". Returns feat's commit."""
    before = {"a/b.txt": "b\n"} if how == "dir->file" else {"a": "a file\n"}
    base = commit_files(repo, {**before, "c.txt": "c\n"}, "base")
    after = {"a": blob(repo, b"now a file\n")} if how == "dir->file" else {"a/b.txt": blob(repo, b"b\n")}
    gone = {p: None for p in before}
    feat = commit_snapshot(repo, base, {**gone, **after}, how)
    repo.create_branch("feat", feat)
    if mode == "3way":
        commit_files(repo, {"c.txt": "c2\n"}, "ours")
    return feat


@pytest.mark.parametrize("how", ["dir->file", "file->dir"])
@pytest.mark.parametrize("mode", ["ff", "3way", "checkout"])
def test_a_directory_replaced_by_a_file_and_back(repo, how, mode):
    """Before: dir->file was refused as "would overwrite uncommitted changes in a" on a clean
    tree; file->dir failed with a raw FileExistsError (checkout: "a directory is in the way")."""
    feat = _replaced(repo, how, mode)
    if mode == "checkout":
        repo.checkout("feat")
    else:
        assert repo.merge_branch("feat").kind == ("fast-forward" if mode == "ff" else "merged")
    expected = {p for p in repo.snapshot() if p != "c.txt"}
    assert expected == set(repo.snapshot(feat)) - {"c.txt"}
    if how == "dir->file":
        assert (repo.root / "a").read_text() == "now a file\n"
    else:
        assert (repo.root / "a" / "b.txt").read_text() == "b\n"
    assert repo.status().clean and not journal.exists(repo.git_dir) and repo.fsck() == []


def test_an_untracked_file_in_a_directory_a_file_replaces_is_kept(repo):
    _replaced(repo, "dir->file", "3way")
    (repo.root / "a" / "mine.txt").write_text("untracked\n")
    head = repo.refs.head()
    with pytest.raises(DirtyWorktreeError, match="merge would overwrite uncommitted changes in a"):
        repo.merge_branch("feat")
    assert repo.refs.head() == head and (repo.root / "a" / "mine.txt").read_text() == "untracked\n"
    with pytest.raises(BadInputError, match="cannot write a: a directory is in the way"):
        repo.checkout("feat")
    assert (repo.root / "a" / "mine.txt").exists() and (repo.root / "a" / "b.txt").exists()


def test_a_merge_on_a_detached_head_moves_only_head(repo):
    diverge(repo, {"a.txt": "a\n"}, {"b.txt": "b\n"}, {"c.txt": "c\n"})
    main = repo.refs.head()
    repo.checkout(main)  # detached
    result = repo.merge_branch("feat")
    assert result.kind == "merged" and result.branch is None and repo.refs.current_branch() is None
    assert repo.graph.commit(repo.refs.head()).parents == (main, repo.resolve("feat"))
    assert repo.resolve("main") == main and (repo.root / "c.txt").exists()


def test_a_merge_into_an_unborn_branch_checks_out_the_revision(repo, tmp_path: Path):
    commit_files(repo, {"a.txt": "a\n", "m.safetensors": {"x": W}}, "first")
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    empty = Repository.init(tmp_path / "empty")
    try:
        empty.remote_add("origin", str(tmp_path / "remote.mgit"))
        empty.fetch()
        result = empty.merge_branch("origin/main")
        assert result.kind == "fast-forward" and result.old_head is None
        assert empty.refs.head() == repo.refs.head() and empty.refs.current_branch() == "main"
        assert tree_hashes(empty.root) == tree_hashes(repo.root) and empty.status().clean
    finally:
        empty.close()


def test_the_revert_of_a_root_commit_removes_its_files(repo):
    root = commit_files(repo, {"a.txt": "a\n", "b.txt": "b\n"}, "root")
    commit_files(repo, {"c.txt": "c\n"}, "later")
    result = repo.revert(root)
    assert result.kind == "reverted" and result.theirs is None and result.target == root
    assert sorted(p.name for p in repo.root.iterdir() if p.name != ".mgit") == ["c.txt"]
    assert repo.graph.commit(result.commit).message == f'Revert "root"\n\nThis reverts commit {root}.'
    assert repo.status().clean


def test_a_revert_report_names_the_side_it_takes(repo):
    """Before: the JSON's "theirs" was the reverted commit; it is the parent whose side is taken."""
    first = commit_files(repo, {"a.txt": "a\n"}, "one")
    second = commit_files(repo, {"a.txt": "a2\n"}, "two")
    repo.close()
    doc = json.loads(invoke("revert", "HEAD", "--json", cwd=repo.root).stdout)
    assert doc["schema"] == "mgit.branch-merge/2" and (doc["target"], doc["theirs"]) == (second, first)
    assert doc["bases"] == [second] and doc["changed"] == {"a.txt": {"how": "theirs", "tensors": {}}}


@pytest.fixture
def upstream(repo, tmp_path: Path) -> tuple[Repository, Repository]:
    """A repository and its clone; the repository then commits again and pushes."""
    commit_files(repo, {"a.txt": "a\n"}, "base")
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    clone = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "clone")
    commit_files(repo, {"b.txt": "b\n"}, "upstream")
    repo.push()
    yield repo, clone
    clone.close()


def test_pull_reports_its_merge(upstream):
    """Before: pull returned the fetch alone, and the CLI guessed from parents what it did."""
    origin, clone = upstream
    pulled = clone.pull()
    assert pulled.merge.kind == "fast-forward" and pulled.merge.op == "pull" and pulled.fetched.objects > 0
    assert clone.reflog("main")[0][3] == "pull: Fast-forward"
    commit_files(clone, {"c.txt": "c\n"}, "local")
    commit_files(origin, {"d.txt": "d\n"}, "upstream 2")
    origin.push()
    assert clone.pull().merge.kind == "merged"
    lonely = origin.graph.put_commit(origin.graph.commit(origin.refs.head()).tree, [], "lonely", b"x <x@y>", b"x <x@y>")
    origin.create_branch("lonely", lonely)
    origin.push("origin", "lonely")
    with pytest.raises(BadInputError, match="unrelated histories"):  # before: "have diverged"
        clone.pull("origin", "lonely", ff_only=True)


def _killed_at_each_point(args: list[str], make: Callable[[Path], Path], tmp_path: Path) -> int:
    """Run ``mgit ARGS`` once whole, then killed at each crash point in a fresh copy made by
    ``make`` (in forked children: benchmarks/crash_points.py): where it left a journal, the next
    command finishes it to the whole run's result. How many runs were finished."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        from crash_points import run_cli
    finally:
        sys.path.pop(0)
    reference, points = make(tmp_path / "reference"), tmp_path / "points"
    assert run_cli(args, reference, {"MGIT_CRASH_LOG": str(points)}, tmp_path / "reference.log") == 0
    want, finished = tree_hashes(reference), 0
    for point in range(1, len(points.read_text().split()) + 1):
        killed, log = make(tmp_path / f"killed-{point}"), tmp_path / f"{point}.log"
        assert run_cli(args, killed, {"MGIT_CRASH_AT": f"any:{point}"}, log) == -9
        if not journal.exists(killed / ".mgit"):
            continue
        assert run_cli(["status"], killed, {}, log) == 0  # which finishes it
        assert tree_hashes(killed) == want and not journal.exists(killed / ".mgit")
        with Repository(killed) as repo, Repository(reference) as done:
            assert repo.graph.commit(repo.refs.head()).tree == done.graph.commit(done.refs.head()).tree
            assert repo.status().clean
        finished += 1
    return finished


def test_a_revert_killed_mid_way_is_finished_by_the_next_command(tmp_path: Path):
    def make(root: Path) -> Path:
        with Repository.init(root) as repo:
            commit_files(repo, {"a.txt": "a\n", "m.safetensors": {"x": W}}, "one")
            commit_files(repo, {"m.safetensors": {"x": W + 1}, "b.txt": "b\n"}, "two")
        return root

    assert _killed_at_each_point(["revert", "HEAD"], make, tmp_path) >= 1


def test_a_pull_killed_mid_way_is_finished_by_the_next_command(tmp_path: Path):
    remote = tmp_path / "remote.mgit"
    with Repository.init(tmp_path / "origin") as origin:
        commit_files(origin, {"a.txt": "a\n", "m.safetensors": {"x": W}}, "base")
        origin.remote_add("origin", str(remote))
        origin.push()
        upstream = [commit_files(origin, {"m.safetensors": {"x": W + 1}}, "upstream")]
        origin.push()
        (base,) = origin.graph.commit(upstream[0]).parents

    def make(root: Path) -> Path:
        with Repository.init(root) as repo:
            repo.remote_add("origin", str(remote))
            repo.fetch()
            repo.merge_branch(base)  # main at the base: the pull fast-forwards it to upstream
        return root

    assert _killed_at_each_point(["pull"], make, tmp_path) >= 1
