"""reset as git does it: --soft, --mixed, --hard (journaled like checkout), on a detached
HEAD, keeping a sparse checkout sparse, never dropping staged tensors no commit holds;
`reset [REV] -- PATH...` unstages."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.cli import invoke
from helpers.histories import small_llama as _sd
from helpers.models import (
    commit_model,
    frozen_finetune,
    touch_later,
    tree_hashes,
    write_model,
)
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError

# -- reset ------------------------------------------------------------------------------------


def test_reset_soft_moves_the_branch_only(two):
    repo, a, b, _, b_files = two
    res = repo.reset(a, mode="soft")
    assert (res.old, res.commit, res.branch) == (b, a, "main")
    assert repo.refs.head() == a and repo.refs.current_branch() == "main"
    assert tree_hashes(repo.root) == b_files
    st = repo.status()
    assert {f.path for f in st.staged} == {"model/model.safetensors", "notes.txt"} and not st.unstaged
    assert repo.commit("b again") != b  # the index still held b's tree
    assert repo.snapshot("HEAD") == repo.snapshot(b)


def test_reset_mixed_unstages_and_keeps_the_working_files(two):
    repo, a, b, _, b_files = two
    proc = invoke("reset", a[:10], cwd=repo.root)
    assert proc.returncode == 0, proc.stderr
    assert "Unstaged changes after reset:" in proc.stdout and "M\tmodel/model.safetensors" in proc.stdout
    assert repo.refs.head() == a
    assert tree_hashes(repo.root) == b_files
    st = repo.status()
    assert not st.staged
    assert [f.path for f in st.unstaged] == ["model/model.safetensors"]
    assert st.unstaged[0].tensors.changed  # which tensors differ is known
    assert st.untracked == ["notes.txt"]  # tracked in b, not in a: left as an untracked file


def test_reset_hard_writes_the_revision(two):
    repo, a, b, a_files, _ = two
    (repo.root / "scratch.txt").write_text("untracked\n")
    res = repo.reset("HEAD~1", mode="hard")
    assert res.commit == a and "model/model.safetensors" in res.written and res.removed == ["notes.txt"]
    assert tree_hashes(repo.root) == a_files | {"scratch.txt": tree_hashes(repo.root)["scratch.txt"]}
    st = repo.status()
    assert not st.staged and not st.unstaged and st.untracked == ["scratch.txt"]
    old, new, _, message = repo.reflog("refs/heads/main")[0]
    assert (old, new, message) == (b, a, "reset: moving to HEAD~1")
    assert repo.reflog()[0][3] == "reset: moving to HEAD~1"
    repo.reset(b, mode="hard")  # and back: the reflog kept b
    st = repo.status()
    assert repo.refs.head() == b and not st.staged and not st.unstaged and (repo.root / "notes.txt").is_file()


def test_reset_hard_discards_working_changes_as_git(two):
    repo, a, b, _, b_files = two
    write_model(repo.root / "model", _sd(9))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.reset("HEAD", mode="hard")
    assert repo.refs.head() == b and tree_hashes(repo.root) == b_files and repo.status().clean


def test_reset_mixed_refuses_to_drop_staged_tensors_no_commit_holds(two):
    repo, a, b, _, _ = two
    write_model(repo.root / "model", _sd(5))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])  # staged: in no commit
    write_model(repo.root / "model", _sd(6))  # and overwritten in the working tree
    touch_later(repo.root / "model" / "model.safetensors")
    before = (repo.git_dir / "mgit-index.json").read_bytes()
    with pytest.raises(DirtyWorktreeError, match="model/model.safetensors.*--hard"):
        repo.reset(a)
    assert repo.refs.head() == b and (repo.git_dir / "mgit-index.json").read_bytes() == before
    proc = invoke("reset", a, cwd=repo.root)
    assert proc.returncode != 0 and proc.stderr.startswith("error: reset would drop staged changes")
    assert "Traceback" not in proc.stderr
    repo.reset(a, mode="soft")  # soft keeps the index: nothing is lost
    assert repo.refs.head() == a


def test_reset_mixed_keeps_staged_changes_the_working_tree_holds(two):
    repo, a, b, _, _ = two
    write_model(repo.root / "model", _sd(5))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.reset(a)  # the staged tensors are still in the working file: allowed
    assert [f.path for f in repo.status().unstaged] == ["model/model.safetensors"]
    repo.add(["model"])
    repo.commit("c")
    assert torch.equal(repo.state_dict()["lm_head.weight"], _sd(5)["lm_head.weight"])


def test_reset_mixed_forward_shows_missing_files_as_deleted(two):
    repo, a, b, _, _ = two
    repo.reset(a, mode="hard")
    repo.reset(b)  # notes.txt is in b, not on disk: deleted, as git shows it
    st = repo.status()
    assert [(f.path, f.change) for f in st.unstaged] == [
        ("model/model.safetensors", "modified"),
        ("notes.txt", "deleted"),
    ]
    assert not st.staged and not st.not_checked_out


def test_reset_keeps_a_sparse_checkout_sparse(two):
    repo, a, b, _, _ = two
    repo.checkout("main", include=["model.layers.1.*"])
    shown = set(repo.status().sparse.patterns.include)
    repo.reset(a, mode="hard")
    st = repo.status()
    assert set(st.sparse.patterns.include) == shown and not st.staged and not st.unstaged
    assert st.sparse.tensors_present < st.sparse.tensors_total
    repo.reset(b)  # mixed: the working file holds a's layer 1, the index b's whole model
    assert repo.status().unstaged
    repo.add(["model"])
    repo.commit("a's layer 1 over b")
    got, want_b, want_a = repo.state_dict(), repo.state_dict(b), repo.state_dict(a)
    assert not torch.equal(want_a["model.layers.1.mlp.up_proj.weight"], want_b["model.layers.1.mlp.up_proj.weight"])
    assert set(got) == set(want_b)  # no tensor left out was dropped
    for name in got:
        want = want_a if name.startswith("model.layers.1.") else want_b
        assert torch.equal(got[name], want[name]), name


def test_reset_on_a_detached_head(two):
    repo, a, b, a_files, _ = two
    repo.checkout(b)
    repo.reset(a, mode="hard")
    assert repo.refs.current_branch() is None and repo.refs.head() == a
    assert repo.branches()["main"] == b and tree_hashes(repo.root) == a_files


def test_reset_bad_input(two):
    repo, *_ = two
    with pytest.raises(BadInputError, match="unknown reset mode"):
        repo.reset("HEAD", mode="keep")
    proc = invoke("reset", "--hard", "nope", cwd=repo.root)
    assert proc.returncode != 0 and "unknown revision 'nope'" in proc.stderr and "Traceback" not in proc.stderr


def test_reset_hard_head_1_undoes_a_merge(repo):
    base = _sd(0)
    commit_model(repo, base, "base")
    before = tree_hashes(repo.root)
    repo.checkout(create_branch="e1")
    write_model(repo.root / "model", frozen_finetune(base, {0}, seed=3))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("e1")
    repo.checkout("main")
    base_commit = repo.refs.head()
    merged = repo.merge(["e1"], "linear", weight=0.5)
    assert repo.refs.head() == merged and tree_hashes(repo.root) != before
    proc = invoke("reset", "--hard", "HEAD^1", cwd=repo.root)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith(f"HEAD is now at {base_commit[:12]} base")
    assert repo.refs.head() == base_commit and tree_hashes(repo.root) == before and repo.status().clean


# -- 4. reset [REV] -- PATH...: unstage -----------------------------------------------------


def _status(repo: Repository) -> tuple[dict[str, str], dict[str, str], list[str]]:
    s = repo.status()
    return {f.path: f.change for f in s.staged}, {f.path: f.change for f in s.unstaged}, s.untracked


def test_reset_paths_unstages_and_leaves_files_and_head(origin):
    repo, _ = origin
    head = repo.resolve("HEAD")
    config = repo.root / "model" / "config.json"
    config.write_text('{"model_type": "llama", "hidden_size": 128}')
    (repo.root / "notes.txt").write_text("new\n")
    (repo.root / "keep.txt").write_text("stays staged\n")
    repo.add(["model/config.json", "notes.txt", "keep.txt"])
    weights = (repo.root / "model" / "model.safetensors").read_bytes()
    proc = invoke("reset", "--", "model/config.json", "notes.txt", cwd=repo.root, check=True)
    assert proc.stdout == "Unstaged changes after reset:\nM\tmodel/config.json\n"
    assert repo.resolve("HEAD") == head and repo.refs.current_branch() == "main"
    assert _status(repo) == ({"keep.txt": "added"}, {"model/config.json": "modified"}, ["notes.txt"])
    assert config.read_text() == '{"model_type": "llama", "hidden_size": 128}'  # working files untouched
    assert (repo.root / "notes.txt").read_text() == "new\n"
    assert (repo.root / "model" / "model.safetensors").read_bytes() == weights
    assert repo.reflog("main")[0][3] != "reset: moving to HEAD"  # HEAD did not move: no reflog entry


def test_reset_rev_paths_stages_that_revisions_entries(origin):
    repo, _ = origin
    a = repo.resolve("HEAD")
    a_snap = repo.snapshot(a)
    b = commit_model(repo, _sd(1), "b")
    b_weights = (repo.root / "model" / "model.safetensors").read_bytes()
    res = repo.reset(a, paths=[repo.root / "model"])  # a directory: every path below it
    assert res.paths == ["model"] and res.commit == b and repo.resolve("HEAD") == b
    assert res.unstaged == ["model/model.safetensors"]  # config.json: the same in a and b
    staged, unstaged, _ = _status(repo)
    assert staged == {"model/model.safetensors": "modified"} and unstaged == {"model/model.safetensors": "modified"}
    assert repo._index().entries["model/model.safetensors"].entry == a_snap["model/model.safetensors"]
    assert (repo.root / "model" / "model.safetensors").read_bytes() == b_weights
    refused = invoke("reset", "--", "model", cwd=repo.root)  # a's weights: in the index only, as staged here
    assert refused.returncode != 0 and refused.stderr.strip() == (
        "error: reset would drop staged changes in model/model.safetensors that no commit or working file holds; "
        "commit them, or `mgit add` the working file over them first"
    )
    doc = json.loads(invoke("reset", "--json", "HEAD", "--", "model/config.json", cwd=repo.root, check=True).stdout)
    assert doc["schema"] == "mgit.reset/1" and doc["paths"] == ["model/config.json"] and doc["unstaged"] == []
    assert doc["commit"] == doc["old"] == b
    repo.add(["model"])
    invoke("reset", "--", "model", cwd=repo.root, check=True)
    assert _status(repo)[:2] == ({}, {})


def test_reset_paths_on_an_unborn_branch_unstages_the_first_files(repo):
    (repo.root / "notes.txt").write_text("oops\n")
    (repo.root / "keep.txt").write_text("keep\n")
    repo.add(["notes.txt", "keep.txt"])
    invoke("reset", "--", "notes.txt", cwd=repo.root, check=True)
    assert _status(repo) == ({"keep.txt": "added"}, {}, ["notes.txt"])


def test_reset_paths_refuses_modes_and_unmatched_paths(origin):
    repo, _ = origin
    (repo.root / "notes.txt").write_text("new\n")
    repo.add(["notes.txt"])
    for args, message in [
        (("--hard",), "reset --hard does not take paths; restore files with `mgit checkout REV -- PATH`"),
        (("--soft",), "reset --soft does not take paths; `mgit reset -- PATH` unstages them"),
        ((), "pathspec 'nope.txt' did not match any file in the index or in HEAD"),
    ]:
        proc = invoke("reset", *args, "--", "notes.txt", "nope.txt", cwd=repo.root)
        assert proc.returncode != 0 and proc.stderr.strip() == f"error: {message}", args
        assert _status(repo)[0] == {"notes.txt": "added"}  # nothing was changed


def test_reset_with_no_path_after_dashdash_is_a_whole_reset(origin):
    repo, _ = origin
    (repo.root / "notes.txt").write_text("new\n")
    repo.add(["notes.txt"])
    run_mgit("reset", "--", cwd=repo.root, check=True)  # as git: `reset --` alone resets the whole index
    assert _status(repo) == ({}, {}, ["notes.txt"])
    with pytest.raises(BadInputError) as empty:
        repo.reset("HEAD", paths=[])
    assert str(empty.value) == "reset was given an empty list of paths; pass paths=None for a whole reset"
