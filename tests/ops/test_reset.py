"""The git habits users reach for first: reset, branch -f/-m/-d/-D/-r/-a, remote-tracking
names as revisions, fetch/pull reporting which refs moved, --json on every listing and
result, and shell completion."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from click.shell_completion import ShellComplete
from helpers.cli import invoke
from helpers.models import (
    LlamaSpec,
    commit_model,
    frozen_finetune,
    llama_state_dict,
    touch_later,
    tree_hashes,
    write_model,
)
from helpers.run import run_mgit

from mgit import Repository
from mgit.cli import cli
from mgit.cli.complete import complete_branch, complete_remote, complete_rev
from mgit.errors import BadInputError, DirtyWorktreeError

SPEC = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)


def _sd(seed: int) -> dict[str, torch.Tensor]:
    return llama_state_dict(SPEC, seed=seed)


@pytest.fixture
def two(repo: Repository) -> tuple[Repository, str, str, dict[str, str], dict[str, str]]:
    """A repository with commits a and b on main (b changes the model and adds notes.txt);
    the working tree files of each."""
    a = commit_model(repo, _sd(0), "a")
    a_files = tree_hashes(repo.root)
    write_model(repo.root / "model", frozen_finetune(_sd(0), {0}))
    touch_later(repo.root / "model" / "model.safetensors")
    (repo.root / "notes.txt").write_text("b only\n")
    repo.add(["model", "notes.txt"])
    b = repo.commit("b")
    return repo, a, b, a_files, tree_hashes(repo.root)


def _json(proc: subprocess.CompletedProcess) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


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


def _base_and_expert(repo, base: dict) -> None:
    """main holds ``base``; branch e1 a fine-tune of it; main checked out."""
    commit_model(repo, base, "base")
    repo.checkout(create_branch="e1")
    commit_model(repo, frozen_finetune(base, {0}, seed=3), "e1")
    repo.checkout("main")


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


# -- branches ---------------------------------------------------------------------------------


def test_branch_force_moves_a_branch(two):
    repo, a, b, _, _ = two
    invoke("branch", "exp", a, cwd=repo.root, check=True)
    refused = invoke("branch", "exp", b, cwd=repo.root)
    assert refused.returncode != 0 and "already exists" in refused.stderr
    invoke("branch", "-f", "exp", b, cwd=repo.root, check=True)
    assert repo.branches()["exp"] == b
    assert repo.reflog("refs/heads/exp")[0][3] == f"branch: Reset to {b}"
    invoke("branch", "-f", "new", a, cwd=repo.root, check=True)  # -f creates, too
    assert repo.branches()["new"] == a


def test_branch_force_refuses_the_checked_out_branch_unless_unchanged(two):
    repo, a, b, _, _ = two
    proc = invoke("branch", "-f", "main", a, cwd=repo.root)
    assert proc.returncode != 0 and "checked-out branch 'main'" in proc.stderr and "mgit reset" in proc.stderr
    assert repo.branches()["main"] == b
    repo.create_branch("main", b, force=True)  # to the commit it holds: allowed, as git
    assert repo.branches()["main"] == b


def test_branch_rename_moves_the_reflog_and_head(two):
    repo, a, b, _, _ = two
    moves = repo.reflog("refs/heads/main")
    invoke("branch", "-m", "main", "trunk", cwd=repo.root, check=True)
    assert "main" not in repo.branches() and repo.branches()["trunk"] == b
    assert repo.refs.current_branch() == "trunk"
    assert repo.reflog("refs/heads/trunk")[1:] == moves
    assert repo.reflog("refs/heads/trunk")[0][3] == "Branch: renamed refs/heads/main to refs/heads/trunk"
    assert not (repo.git_dir / "logs" / "refs" / "heads" / "main").exists()
    assert invoke("status", cwd=repo.root, check=True).stdout.startswith("On branch trunk")
    repo.create_branch("side", a)
    repo.rename_branch("side", "other")  # not the current one: HEAD stays
    assert repo.refs.current_branch() == "trunk" and repo.branches()["other"] == a
    with pytest.raises(BadInputError, match="already exists"):
        repo.rename_branch("other", "trunk")
    with pytest.raises(BadInputError, match="not found"):
        repo.rename_branch("ghost", "x")
    invoke("branch", "-m", "main", cwd=repo.root, check=True)  # one name: the current branch
    assert repo.refs.current_branch() == "main"


def test_branch_delete_refuses_an_unmerged_branch(two):
    repo, a, b, _, _ = two
    repo.checkout(create_branch="exp")
    write_model(repo.root / "model", _sd(7))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("only on exp")
    repo.checkout("main")
    proc = invoke("branch", "-d", "exp", cwd=repo.root)
    assert proc.returncode != 0
    assert proc.stderr.strip() == (
        "error: the branch 'exp' is not fully merged; if you are sure you want to delete it, run `mgit branch -D exp`"
    )
    assert "exp" in repo.branches()
    invoke("branch", "-D", "exp", cwd=repo.root, check=True)
    assert "exp" not in repo.branches()
    repo.create_branch("old", a)  # reachable from HEAD: -d deletes it
    invoke("branch", "-d", "old", cwd=repo.root, check=True)
    assert "old" not in repo.branches()


def test_branch_delete_accepts_a_branch_merged_into_its_upstream(two, tmp_path):
    repo, a, b, _, _ = two
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.checkout(create_branch="exp")
    write_model(repo.root / "model", _sd(8))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("pushed")
    repo.push("origin", "exp")
    repo.checkout("main")
    repo.delete_branch("exp", force=False)  # origin/exp holds it
    assert "exp" not in repo.branches()


@pytest.fixture
def cloned(two, tmp_path):
    """``two`` pushed to a directory remote, and a clone of it."""
    repo, a, b, _, _ = two
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    clone = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "clone")
    yield repo, clone, a, b
    clone.close()


def test_branch_lists_remote_tracking_branches(cloned):
    _, clone, a, b = cloned
    plain = invoke("branch", cwd=clone.root, check=True).stdout
    assert plain == "* main\n"
    assert invoke("branch", "-r", cwd=clone.root, check=True).stdout == "  origin/main\n"
    assert invoke("branch", "-a", cwd=clone.root, check=True).stdout == "* main\n  remotes/origin/main\n"
    doc = _json(invoke("branch", "--json", cwd=clone.root))
    assert doc == {
        "schema": "mgit.branch/1",
        "current": "main",
        "head": b,
        "branches": [{"name": "main", "commit": b, "current": True}],
        "remote_branches": [{"name": "origin/main", "commit": b}],
    }


def test_remote_tracking_names_resolve_as_revisions(cloned):
    origin, clone, a, b = cloned
    origin.create_branch("exp", a)
    origin.push("origin", "exp")
    clone.fetch()
    assert clone.resolve("origin/exp") == a and clone.resolve("origin/main~1") == a
    assert clone.resolve("remotes/origin/exp") == a
    assert [c.id for c in clone.log("origin/exp")] == [a]
    assert clone.state_dict("origin/exp", names=["lm_head.weight"])["lm_head.weight"].shape[0] == SPEC.vocab
    shown = _json(invoke("show", "--json", "origin/exp", cwd=clone.root))
    assert shown["id"] == a
    assert _json(invoke("log", "--json", "origin/main", cwd=clone.root))["commits"][0]["id"] == b
    clone.checkout("origin/exp")
    assert clone.refs.current_branch() is None and clone.refs.head() == a


# -- fetch / pull report which refs moved -------------------------------------------------------


def test_fetch_prints_which_refs_moved(cloned):
    origin, clone, a, b = cloned
    quiet = invoke("fetch", cwd=clone.root, check=True)
    assert "->" not in quiet.stderr  # nothing moved
    c = commit_model(origin, _sd(11), "c")
    origin.push()
    origin.create_branch("exp", a)
    origin.push("origin", "exp")
    proc = invoke("fetch", cwd=clone.root, check=True)
    lines = proc.stderr.splitlines()
    assert f"   {b[:7]}..{c[:7]}  main -> origin/main" in lines
    assert " * [new branch]      exp -> origin/exp" in lines
    assert any(line.startswith("From ") for line in lines)
    origin.push("origin", "exp")  # unchanged
    origin.create_branch("exp", b, force=True)
    origin.push("origin", "exp", force=True)  # a rewind: forced
    doc = _json(invoke("fetch", "--json", cwd=clone.root))
    assert doc["refs"]["refs/heads/exp"] == {"old": a, "new": b}
    assert doc["refs"]["refs/heads/main"] == {"old": c, "new": c}
    origin.create_branch("exp", a, force=True)
    origin.push("origin", "exp", force=True)
    proc = invoke("fetch", cwd=clone.root, check=True)
    assert f" + {b[:7]}...{a[:7]} exp -> origin/exp  (forced update)" in proc.stderr.splitlines()


def test_pull_prints_the_moves_and_the_fast_forward(cloned):
    origin, clone, a, b = cloned
    c = commit_model(origin, _sd(12), "c")
    origin.push()
    origin.tag("v1", c)
    origin.push("origin", "v1")
    proc = invoke("pull", cwd=clone.root, check=True)
    assert f"   {b[:7]}..{c[:7]}  main -> origin/main" in proc.stderr.splitlines()
    assert " * [new tag]         v1 -> v1" in proc.stderr.splitlines()
    assert proc.stdout == f"Updating {b[:7]}..{c[:7]}\nFast-forward\n model/model.safetensors | from origin/main\n"
    again = _json(invoke("pull", "--json", cwd=clone.root))
    assert again["schema"] == "mgit.transfer/1" and again["kind"] == "pull"
    assert again["head"] == {"branch": "main", "old": c, "new": c, "merge": "up-to-date"}
    assert invoke("pull", cwd=clone.root, check=True).stdout == "Already up to date.\n"


# -- --json on every listing and result --------------------------------------------------------


def test_json_listings(two, tmp_path):
    repo, a, b, _, _ = two
    repo.tag("v1", a)
    repo.remote_add("origin", str(tmp_path / "r.mgit"))
    root = repo.root
    tags = [{"name": "v1", "commit": a, "annotated": False, "message": None}]
    assert _json(invoke("tag", "--json", cwd=root)) == {"schema": "mgit.tag/1", "tags": tags}
    assert _json(invoke("remote", "--json", cwd=root)) == {
        "schema": "mgit.remote/1",
        "remotes": [{"name": "origin", "url": str((tmp_path / "r.mgit").resolve())}],
    }
    for args, ref in (
        (("reflog", "--json"), "HEAD"),
        (("reflog", "show", "refs/heads/main", "--json"), "refs/heads/main"),
    ):
        doc = _json(invoke(*args, cwd=root))
        assert doc["schema"] == "mgit.reflog/1" and doc["ref"] == ref
        assert [(e["old"], e["new"]) for e in doc["entries"]] == [(a, b), (None, a)]
        assert doc["entries"][0]["message"] == "commit: b" and isinstance(doc["entries"][0]["time"], int)
    # the listings without --json stay as they were
    assert invoke("tag", cwd=root, check=True).stdout == "v1\n"
    assert invoke("remote", cwd=root, check=True).stdout.split() == ["origin", str((tmp_path / "r.mgit").resolve())]


def test_json_results(two):
    repo, a, b, _, _ = two
    root = repo.root
    write_model(root / "model", _sd(3))
    touch_later(root / "model" / "model.safetensors")
    added = _json(invoke("add", "model", "--json", cwd=root))
    assert added["schema"] == "mgit.add/1" and added["added"] == ["model/model.safetensors"]
    assert added["removed"] == [] and added["new_chunks"] > 0 and added["logical_bytes"] > 0
    committed = _json(invoke("commit", "-m", "c", "--json", cwd=root))
    c = repo.refs.head()
    assert committed == {"schema": "mgit.commit/1", "commit": c, "branch": "main", "parents": [b]}
    out = _json(invoke("checkout", a, "--json", cwd=root))
    assert out["schema"] == "mgit.checkout/1" and out["commit"] == a and out["detached"] is True
    assert out["branch"] is None and "model/model.safetensors" in out["written"] and out["removed"] == ["notes.txt"]
    assert out["bytes_read"] > 0 and out["cost"] is None
    invoke("checkout", "main", cwd=root, check=True)
    reset = _json(invoke("reset", "--hard", "HEAD~2", "--json", cwd=root))
    assert reset["schema"] == "mgit.reset/1" and (reset["old"], reset["commit"], reset["mode"]) == (c, a, "hard")
    assert reset["branch"] == "main" and reset["removed"] == ["notes.txt"]


def test_merge_json_result(repo):
    base = _sd(0)
    _base_and_expert(repo, base)
    proc = invoke("merge", "--method", "task_arithmetic", "--weights", "0.5", "e1", "--json", cwd=repo.root)
    doc = _json(proc)
    record = repo.merge_record("HEAD")
    assert doc["schema"] == "mgit.merge/1" and doc["commit"] == repo.refs.head() and doc["branch"] == "main"
    assert doc["method"] == "task_arithmetic" and doc["bytes"] == record["bytes"]
    assert doc["bytes"]["experts_measured"] > 0
    assert doc["experts"] == record["experts"] and doc["plan"]["tensors"] == len(record["tensors"])
    assert sum(doc["plan"]["decisions"].values()) == len(record["tensors"]) and doc["plan"]["budget"] is None


# -- shell completion ---------------------------------------------------------------------------


def _completions(args: list[str], incomplete: str, cwd: Path) -> list[str]:
    """What click's completion offers for ``mgit ARGS INCOMPLETE``, in this process."""
    old = os.getcwd()
    os.chdir(cwd)
    try:
        comp = ShellComplete(cli, {}, "mgit", "_MGIT_COMPLETE")
        return [c.value for c in comp.get_completions(args, incomplete)]
    finally:
        os.chdir(old)


def test_completion_callbacks(cloned):
    origin, clone, a, b = cloned
    clone.create_branch("exp-1")
    clone.tag("v1")
    root = clone.root
    assert _completions(["checkout"], "", root) == ["exp-1", "main", "v1", "origin/main", "HEAD"]
    assert _completions(["checkout"], "ex", root) == ["exp-1"]
    assert _completions(["branch", "-d"], "", root) == ["exp-1", "main"]
    assert _completions(["push"], "", root) == ["origin"]
    assert _completions(["log"], "orig", root) == ["origin/main"]
    assert _completions(["reset", "--hard"], "v", root) == ["v1"]
    assert _completions(["merge", "--method", "ties", "--base"], "m", root) == ["main"]
    assert _completions(["-C", str(root), "diff"], "e", root.parent) == ["exp-1"]  # -C is honoured
    assert _completions(["checkout"], "", root.parent) == []  # outside a repository: nothing, no error
    # the callbacks themselves, as click calls them
    ctx = cli.make_context("mgit", ["-C", str(root)], resilient_parsing=True)
    assert complete_rev(ctx, None, "") == ["exp-1", "main", "v1", "origin/main", "HEAD"]
    assert complete_branch(ctx, None, "m") == ["main"] and complete_remote(ctx, None, "") == ["origin"]


def test_bash_completion_in_a_shell(two):
    repo, *_ = two
    repo.create_branch("feature")
    env = {**os.environ, "_MGIT_COMPLETE": "bash_complete", "COMP_WORDS": "mgit checkout f", "COMP_CWORD": "2"}
    proc = subprocess.run(
        [sys.executable, "-m", "mgit"], cwd=repo.root, env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["plain,feature"]
    for shell, marker in (("bash", "complete -o nosort -F"), ("zsh", "#compdef mgit"), ("fish", "complete --no-files")):
        script = run_mgit("completion", shell, cwd=repo.root, check=True).stdout
        assert marker in script and "_MGIT_COMPLETE" in script
    source = subprocess.run(
        [sys.executable, "-m", "mgit"], cwd=repo.root, env={**os.environ, "_MGIT_COMPLETE": "bash_source"},
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert source.stdout.strip() == run_mgit("completion", "bash", cwd=repo.root, check=True).stdout.strip()
