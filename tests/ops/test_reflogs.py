"""Reflogs as git keeps them: remote-tracking branches' (fetch, push, pull, clone), none for
tags, `REF@{N}` positions as revisions, and a removed remote's forgotten."""

from __future__ import annotations

import pytest
import torch
from helpers.cli import invoke
from helpers.models import LlamaSpec, commit_model, llama_state_dict

from mgit import Repository
from mgit.errors import RevisionError

SPEC = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)


def _sd(seed: int) -> dict[str, torch.Tensor]:
    return llama_state_dict(SPEC, seed=seed)


def _messages(repo: Repository, ref: str) -> list[str]:
    return [message for _, _, _, message in repo.reflog(ref)]


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


def test_removing_a_remote_forgets_its_tracking_reflogs(origin, tmp_path):
    repo, url = origin
    repo.push()
    assert (repo.git_dir / "logs" / "refs" / "remotes" / "origin" / "main").exists()
    repo.remote_remove("origin")
    assert not (repo.git_dir / "logs" / "refs" / "remotes" / "origin").exists()
    shown = invoke("reflog", "show", "origin/main", cwd=repo.root)
    assert shown.returncode != 0 and shown.stdout == ""
