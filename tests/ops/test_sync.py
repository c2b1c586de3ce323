"""Push, fetch, pull and clone as git does them: what they print about the refs they moved, and what they refuse."""

from __future__ import annotations

from helpers.cli import invoke
from helpers.histories import json_result as _json
from helpers.histories import small_llama as _sd
from helpers.models import (
    commit_model,
)

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
