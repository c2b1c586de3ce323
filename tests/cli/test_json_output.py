"""`--json` on every listing and result (tag, remote, reflog; add, commit, checkout, reset,
merge): each document carries its schema."""

from __future__ import annotations

from helpers.cli import invoke
from helpers.histories import json_result as _json
from helpers.histories import small_llama as _sd
from helpers.models import (
    commit_model,
    frozen_finetune,
    touch_later,
    write_model,
)

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


def _base_and_expert(repo, base: dict) -> None:
    """main holds ``base``; branch e1 a fine-tune of it; main checked out."""
    commit_model(repo, base, "base")
    repo.checkout(create_branch="e1")
    commit_model(repo, frozen_finetune(base, {0}, seed=3), "e1")
    repo.checkout("main")
