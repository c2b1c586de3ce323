"""More git habits: reflogs of remote-tracking branches (fetch, push, pull, clone), `branch -M`,
`REF@{N}` reflog revisions, and `reset [REV] -- PATH...` (unstage)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from helpers.cli import invoke
from helpers.models import LlamaSpec, commit_model, llama_state_dict
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import BadInputError, RevisionError

SPEC = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)


def _sd(seed: int) -> dict[str, torch.Tensor]:
    return llama_state_dict(SPEC, seed=seed)


def _messages(repo: Repository, ref: str) -> list[str]:
    return [message for _, _, _, message in repo.reflog(ref)]


@pytest.fixture
def origin(repo: Repository, tmp_path: Path) -> tuple[Repository, str]:
    """A repository with one commit on main and a directory remote ``origin`` (empty yet)."""
    commit_model(repo, _sd(0), "a")
    url = str(tmp_path / "remote.mgit")
    repo.remote_add("origin", url)
    return repo, url


# -- 1. reflogs of remote-tracking branches ------------------------------------------------


def test_push_fetch_pull_and_clone_log_the_tracking_branch(origin, tmp_path):
    repo, url = origin
    repo.push()
    assert _messages(repo, "origin/main") == ["update by push"]
    with Repository.clone(url, tmp_path / "clone") as clone:
        assert _messages(clone, "origin/main") == [f"clone: from {url}"]
        b = commit_model(repo, _sd(1), "b")
        repo.push()
        clone.fetch()
        assert _messages(clone, "origin/main") == ["fetch: fast-forward", f"clone: from {url}"]
        clone.fetch()  # nothing moved: no entry, as in git
        assert len(clone.reflog("origin/main")) == 2
        c = commit_model(repo, _sd(2), "c")
        repo.push()
        clone.pull()
        assert _messages(clone, "origin/main")[0] == "pull: fast-forward"
        assert [new for _, new, _, _ in clone.reflog("origin/main")][:2] == [c, b]
        assert clone.resolve("origin/main@{1}") == b and clone.resolve("origin/main@{0}~1") == b
        repo.checkout(create_branch="exp")
        repo.push("origin", "exp")
        clone.fetch()
        assert _messages(clone, "origin/exp") == ["fetch: storing head"]
        repo.reset("HEAD~1")
        repo.push("origin", "exp", force=True)
        clone.fetch()
        assert _messages(clone, "origin/exp")[0] == "fetch: forced-update"
        shown = invoke("reflog", "show", "origin/main", cwd=clone.root, check=True).stdout.splitlines()
        assert len(shown) == 3 and shown[0].startswith(f"{c[:12]} origin/main@{{0}} ")
        assert shown[0].endswith(" pull: fast-forward") and shown[-1].endswith(f" clone: from {url}")


def test_reflog_of_a_tag_says_tags_keep_none(origin):
    repo, _ = origin
    repo.tag("v1")
    proc = invoke("reflog", "show", "v1", cwd=repo.root)
    assert proc.returncode == 0 and proc.stdout == ""
    assert proc.stderr.strip() == "refs/tags/v1 has no reflog: tags keep none (as in git); `mgit show v1` shows it"


# -- 2. branch -M -------------------------------------------------------------------------


def test_branch_force_rename_replaces_an_existing_branch(origin):
    repo, _ = origin
    a = repo.resolve("HEAD")
    repo.create_branch("old")
    b = commit_model(repo, _sd(1), "b")
    repo.create_branch("new", b)
    refused = invoke("branch", "-m", "old", "new", cwd=repo.root)
    assert refused.returncode != 0 and refused.stderr.strip() == "error: branch 'new' already exists"
    invoke("branch", "-M", "old", "new", cwd=repo.root, check=True)
    assert repo.branches() == {"main": b, "new": a}
    renamed = "Branch: renamed refs/heads/old to refs/heads/new"
    assert _messages(repo, "new") == [renamed, f"branch: created from {a[:12]}"]  # old's history, not new's
    current = invoke("branch", "-M", "new", "main", cwd=repo.root)
    assert current.returncode != 0
    assert current.stderr.strip() == (
        "error: cannot force-rename onto the checked-out branch 'main'; switch to another branch first"
    )
    assert repo.branches() == {"main": b, "new": a}
    invoke("branch", "-M", "main", "trunk", cwd=repo.root, check=True)  # the current one: HEAD follows
    assert repo.refs.current_branch() == "trunk" and repo.branches() == {"trunk": b, "new": a}
    invoke("branch", "-M", "trunk", cwd=repo.root, check=True)  # itself: nothing to do
    assert repo.branches() == {"trunk": b, "new": a}


# -- 3. REF@{N}: reflog positions as revisions ----------------------------------------------


def test_reflog_positions_resolve_as_revisions(origin):
    repo, _ = origin
    a = repo.resolve("HEAD")
    b = commit_model(repo, _sd(1), "b")
    c = commit_model(repo, _sd(2), "c")
    repo.reset("HEAD~2")  # main: a, b, c, then back to a
    assert [repo.resolve(f"main@{{{n}}}") for n in range(4)] == [a, c, b, a]
    assert repo.resolve("@{1}") == c and repo.resolve("HEAD@{1}") == c and repo.resolve("@{0}") == a
    assert repo.resolve("main@{1}~1") == b and repo.resolve("main@{1}^1") == b
    assert repo.resolve("refs/heads/main@{2}") == b
    assert [x.id for x in repo.log("main@{1}")] == [c, b, a]
    assert repo.show("HEAD@{2}").commit.id == b
    repo.checkout(create_branch="exp")  # HEAD's reflog has the checkout; exp's has its creation only
    assert repo.resolve("HEAD@{0}") == a and repo.resolve("HEAD@{1}") == a and repo.resolve("HEAD@{2}") == c
    assert repo.resolve("@{0}") == a
    with pytest.raises(RevisionError) as short:
        repo.resolve("@{1}")  # the current branch's reflog (exp's), not HEAD's
    assert str(short.value) == "revision '@{1}': the reflog of refs/heads/exp has only 1 entry (@{0} is the newest)"
    repo.checkout("main@{1}", force=True)  # a detached HEAD: @{N} then reads HEAD's reflog
    assert repo.refs.current_branch() is None and repo.resolve("HEAD") == c
    assert repo.resolve("@{1}") == a


def test_reflog_positions_in_the_cli_and_their_errors(origin):
    repo, _ = origin
    a = repo.resolve("HEAD")
    b = commit_model(repo, _sd(1), "b")
    shown = invoke("log", "--oneline", "main@{1}", cwd=repo.root, check=True).stdout
    assert shown.splitlines()[0].startswith(a[:12]) and len(shown.splitlines()) == 1
    assert invoke("diff", "--stat", "HEAD@{1}", "HEAD@{0}", cwd=repo.root).returncode == 0
    invoke("branch", "old", "main@{1}", cwd=repo.root, check=True)
    assert repo.branches()["old"] == a and repo.branches()["main"] == b
    repo.tag("v1")
    for rev, message in [
        ("main@{5}", "revision 'main@{5}': the reflog of refs/heads/main has only 2 entries (main@{0} is the newest)"),
        ("v1@{0}", "revision 'v1@{0}': refs/tags/v1 has no reflog (tags keep none, as in git)"),
        ("main@{yesterday}", "invalid revision 'main@{yesterday}': mgit reads reflog positions, REF@{N} (N = 0, 1, …)"),
        ("nope@{1}", "unknown ref 'nope' (a branch, tag, remote-tracking branch such as origin/main, or HEAD)"),
    ]:
        proc = invoke("show", rev, cwd=repo.root)
        assert proc.returncode != 0 and proc.stdout == ""
        assert proc.stderr.strip() == f"error: {message}", rev


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


def test_removing_a_remote_forgets_its_tracking_reflogs(origin, tmp_path):
    repo, url = origin
    repo.push()
    assert (repo.git_dir / "logs" / "refs" / "remotes" / "origin" / "main").exists()
    repo.remote_remove("origin")
    assert not (repo.git_dir / "logs" / "refs" / "remotes" / "origin").exists()
    shown = invoke("reflog", "show", "origin/main", cwd=repo.root)
    assert shown.returncode != 0 and shown.stdout == ""
