"""Push, fetch, pull and clone as git does them: what they print about the refs they moved, and what they refuse."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.histories import json_result as _json
from helpers.histories import pushed_text
from helpers.histories import small_llama as _sd
from helpers.histories import text_commit as _text_commit
from helpers.models import commit_model

from mgit import Repository
from mgit.errors import NonFastForwardError

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


# -- push --all / --tags / --delete -------------------------------------------------------------


def test_push_all_and_tags(forked_pushed):
    repo, a, b, url = forked_pushed
    repo.tag("v1", message="annotated")
    repo.tag("light", "side")
    t = repo.push(all_branches=True)
    theirs = repo._backend("origin").refs()
    assert theirs["refs/heads/side"] == a and theirs["refs/heads/main"] == b and "refs/tags/v1" not in theirs
    assert set(t.refs) == {"refs/heads/main", "refs/heads/side"}
    doc = json.loads(invoke("push", "--tags", "--json", cwd=repo.root, check=True).stdout)
    assert set(doc["refs"]) == {"refs/tags/v1", "refs/tags/light"}
    theirs = repo._backend("origin").refs()
    assert theirs["refs/tags/v1"] == repo.refs.tag_refs()["v1"] != b  # the tag object itself
    with Repository.clone(url, repo.root.parent / "clone") as clone:
        assert clone.tags() == {"v1": b, "light": a} and clone.refs.tag_message("v1") == "annotated"


def test_push_tags_refuses_moving_a_remote_tag_unless_forced(forked_pushed):
    repo, a, b, _ = forked_pushed
    repo.tag("v1", "side")
    repo.push(tags=True)
    repo.delete_tag("v1")
    repo.tag("v1", "main")
    repo.tag("v2")
    with pytest.raises(NonFastForwardError, match="refs/tags/v1 exists and names another object"):
        repo.push(tags=True)
    theirs = repo._backend("origin").refs()
    assert theirs["refs/tags/v1"] == a and theirs["refs/tags/v2"] == b  # the others were forked_pushed
    repo.push(tags=True, force=True)
    assert repo._backend("origin").refs()["refs/tags/v1"] == b


def test_push_delete_removes_the_remote_branch_and_its_tracking_branch(forked_pushed):
    repo, a, _, _ = forked_pushed
    repo.push("origin", "side")
    assert "origin/side" in repo.remote_branches()
    doc = json.loads(invoke("push", "--delete", "origin", "side", "--json", cwd=repo.root, check=True).stdout)
    assert doc["refs"] == {"refs/heads/side": {"old": a, "new": None}}
    assert "refs/heads/side" not in repo._backend("origin").refs() and "origin/side" not in repo.remote_branches()
    assert repo.branches()["side"] == a  # the local branch stays
    gone = invoke("push", "-d", "origin", "side", cwd=repo.root)
    assert gone.returncode == 1 and "the remote 'origin' has no such branch or tag" in gone.stderr
    default = invoke("push", "--delete", "origin", "main", cwd=repo.root)
    assert default.returncode == 2 and "the remote's default branch" in default.stderr
    assert "refs/heads/main" in repo._backend("origin").refs()


# -- push ---------------------------------------------------------------------------------------


@pytest.fixture
def remote(repo: Repository, tmp_path: Path) -> tuple[Repository, str]:
    return pushed_text(repo, tmp_path)


def test_push_refuses_a_name_that_is_no_branch_or_tag(remote):
    repo, first = remote
    before = repo._backend("origin").refs()
    for name in (first[:12], first, "main~0", "nosuch"):
        proc = invoke("push", "origin", name, cwd=repo.root)
        assert proc.returncode == 2 and f"{name!r} is not a local branch or tag: nothing was pushed" in proc.stderr
        assert repo._backend("origin").refs() == before
    second = _text_commit(repo, {"b.txt": "b\n"}, "b")
    invoke("push", "origin", "HEAD", cwd=repo.root, check=True)  # HEAD: the current branch, as git's
    after = repo._backend("origin").refs()
    assert after["refs/heads/main"] == second and "refs/heads/HEAD" not in after


def test_push_of_several_refs_says_which_were_pushed(remote):
    repo, first = remote
    repo.tag("v1")
    repo.tag("v2")
    repo.push(tags=True)
    second = _text_commit(repo, {"b.txt": "b\n"}, "b")
    for name in ("v1", "v2"):
        repo.delete_tag(name)
        repo.tag(name, second)
    with pytest.raises(NonFastForwardError) as every:
        repo.push(tags=True)
    assert str(every.value).endswith("; nothing was pushed") and "other refs" not in str(every.value)
    repo.tag("v3")
    with pytest.raises(NonFastForwardError) as some:
        repo.push(tags=True)
    assert str(some.value).endswith("; pushed refs/tags/v3")
    assert repo._backend("origin").refs()["refs/tags/v1"] == first
