"""Branches and tags as git keeps them: branch -f/-m/-M/-d/-D/-r/-a/-v, remote-tracking names as
revisions, annotated tags, ref names that clash."""

from __future__ import annotations

import json
import shutil
import subprocess

import pytest
from dulwich.objects import Tag
from helpers.cli import invoke
from helpers.histories import SPEC
from helpers.histories import json_result as _json
from helpers.histories import small_llama as _sd
from helpers.models import TINY, commit_model, llama_state_dict, small_state_dict, touch_later, write_model

from mgit import Repository
from mgit.errors import BadInputError

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


# -- branch -v, remote -v ----------------------------------------------------------------------


def test_branch_verbose_shows_commit_subject_and_upstream(forked_pushed):
    repo, a, b, _ = forked_pushed
    out = invoke("branch", "-v", cwd=repo.root, check=True).stdout.splitlines()
    assert out == [f"* main {b[:12]} b", f"  side {a[:12]} a"]
    commit_model(repo, small_state_dict(3), "c")
    out = invoke("branch", "-vv", cwd=repo.root, check=True).stdout.splitlines()
    assert out[0].startswith("* main ") and out[0].endswith(" [origin/main: ahead 1] c")
    assert out[1] == f"  side {a[:12]} a"  # no upstream: none shown
    info = {i.name: i for i in repo.branch_info(upstreams=True)}
    assert (info["main"].upstream, info["main"].ahead, info["main"].behind) == ("origin/main", 1, 0)


def test_remote_verbose_prints_fetch_and_push_urls(forked_pushed):
    repo, _, _, url = forked_pushed
    out = invoke("remote", "-v", cwd=repo.root, check=True).stdout
    assert out == f"origin\t{url} (fetch)\norigin\t{url} (push)\n"


# -- annotated tags -----------------------------------------------------------------------------


def test_annotated_tag_is_a_git_tag_object_peeled_as_a_revision(forked):
    repo, a, b = forked
    invoke("tag", "-a", "v1", "-m", "first release", "side", cwd=repo.root, check=True)
    repo.tag("v0", b)
    raw = repo.refs.tag_refs()["v1"]
    obj = repo.graph.read(raw)
    assert isinstance(obj, Tag) and obj.object[1].decode() == a and obj.name == b"v1"
    assert repo.tags() == {"v0": b, "v1": a} and repo.resolve("v1") == a and repo.resolve("v1~0") == a
    assert invoke("log", "--oneline", "v1", cwd=repo.root, check=True).stdout.startswith(a[:12])
    listed = invoke("tag", "-n", cwd=repo.root, check=True).stdout.splitlines()
    assert [line.split(None, 1) for line in listed] == [["v0", "b"], ["v1", "first release"]]
    doc = json.loads(invoke("tag", "--json", cwd=repo.root, check=True).stdout)
    assert doc["tags"][1] == {"name": "v1", "commit": a, "annotated": True, "message": "first release"}
    assert doc["tags"][0]["annotated"] is False and doc["tags"][0]["message"] is None
    repo.checkout("v1")
    assert repo.refs.head() == a
    refused = invoke("tag", "-a", "v2", cwd=repo.root)
    assert refused.returncode == 2 and "an annotated tag needs its message" in refused.stderr
    if shutil.which("git"):  # readable by git itself
        shown = subprocess.run(["git", f"--git-dir={repo.git_dir}", "cat-file", "-p", "v1"], capture_output=True)
        assert shown.returncode == 0 and b"tag v1" in shown.stdout and b"first release" in shown.stdout


# -- item 12: branch and tag names that clash with an existing ref ------------------------------


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (
            ["branch", "a"],
            ["branch", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["branch", "a/b"],
            ["branch", "a"],
            "cannot create refs/heads/a: it clashes with the existing ref refs/heads/a/b",
        ),
        (
            ["branch", "a"],
            ["branch", "-f", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["branch", "a"],
            ["branch", "-m", "a", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["branch", "x"],
            ["branch", "-m", "x", "main/y"],
            "cannot create refs/heads/main/y: it clashes with the existing ref refs/heads/main",
        ),
        (
            ["branch", "a"],
            ["checkout", "-b", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["tag", "v1"],
            ["tag", "v1/rc"],
            "cannot create refs/tags/v1/rc: it clashes with the existing ref refs/tags/v1",
        ),
    ],
)
def test_a_ref_name_clash_is_one_line(repo: Repository, setup: list[str], args: list[str], message: str) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    repo.close()
    assert invoke(*setup, cwd=repo.root).returncode == 0
    refs_before = sorted(p.relative_to(repo.git_dir).as_posix() for p in (repo.git_dir / "refs").rglob("*"))
    proc = invoke(*args, cwd=repo.root)
    assert proc.returncode == 2 and proc.stderr == f"error: {message}\n", proc.stderr
    assert sorted(p.relative_to(repo.git_dir).as_posix() for p in (repo.git_dir / "refs").rglob("*")) == refs_before


def _messages(repo: Repository, ref: str) -> list[str]:
    return [message for _, _, _, message in repo.reflog(ref)]


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
