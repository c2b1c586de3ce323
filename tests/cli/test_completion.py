"""Shell completion: click's completion callbacks for branches, remotes and revisions, and bash
completing `mgit` in a real shell."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from click.shell_completion import ShellComplete
from helpers.run import run_mgit

from mgit.cli import cli
from mgit.cli.complete import complete_branch, complete_remote, complete_rev

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
        [sys.executable, "-m", "mgit"],
        cwd=repo.root,
        env={**os.environ, "_MGIT_COMPLETE": "bash_source"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert source.stdout.strip() == run_mgit("completion", "bash", cwd=repo.root, check=True).stdout.strip()
