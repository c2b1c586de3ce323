"""The README's "Using it" commands run as written (issue 12: "README and guide examples still
run"), one after another on a tiny synthetic model in a temporary directory, each exiting 0.
They run in-process through the CLI's own entry point (``helpers.cli.invoke``): the same parsing
and error mapping as a subprocess at a fraction of the cost; tests/cli/test_walkthrough.py runs
the real ``python -m mgit`` process."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import torch
from helpers.cli import invoke
from helpers.models import LlamaSpec, commit_model, frozen_finetune, llama_state_dict, touch_later, write_model

from mgit import Repository

README = Path(__file__).resolve().parent.parent / "README.md"
SPEC = LlamaSpec(layers=4, hidden=32, intermediate=64, vocab=64)
REMOTE_DIR = "/srv/models/llama.mgit"  # the README's directory remote: a temporary directory stands in


def readme_commands() -> list[str]:
    """Each `mgit ...` command of the "Using it" bash block (`;` splits a line; comments dropped)."""
    section = README.read_text().split("## Using it", 1)[1]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "README.md has no bash block under 'Using it'"
    commands = []
    for line in block.group(1).splitlines():
        words = shlex.split(line, comments=True)
        while words:
            cut = words.index(";") if ";" in words else len(words)
            commands.append(shlex.join(words[:cut]))
            words = words[cut + 1 :]
    return commands


def needs_a_server(command: str) -> bool:
    """Skipped: `mgit clone --partial http://host:8790/llama` needs a running `mgit serve`
    (remotes are tested in tests/remote/). The directory remote of `mgit remote add` and
    `mgit push` runs, with a temporary directory in place of /srv/models."""
    return "http://" in command or "https://" in command or "s3://" in command


def _fine_tune(root: Path, seed: int) -> None:
    """What the README's "... fine-tune, overwrite model/ ..." stands for."""
    write_model(root / "model", frozen_finetune(llama_state_dict(SPEC), {0}, seed=seed))
    touch_later(root / "model" / "model.safetensors")


def _experts(root: Path, names: list[str]) -> None:
    """The branches the merge examples name (math, code, a, b, c, d): fine-tunes of main."""
    with Repository(root) as repo:
        for seed, name in enumerate(names, start=10):
            repo.checkout("main")
            repo.checkout(create_branch=name)
            commit_model(repo, frozen_finetune(llama_state_dict(SPEC), {1}, seed=seed), name)
        repo.checkout("main")


def test_readme_commands_run_as_written(tmp_path: Path) -> None:
    root = tmp_path / "work"
    root.mkdir()
    write_model(root / "model", llama_state_dict(SPEC))
    commands = readme_commands()
    assert commands[0] == "mgit init" and len(commands) > 20
    merges = [c for c in commands if c.startswith("mgit merge ")]
    assert merges and "mgit checkout -b sft" in commands, "the README's example changed: update this test's hooks"
    ran, skipped = [], []
    for command in commands:
        assert command.startswith("mgit "), command
        if needs_a_server(command):
            skipped.append(command)
            continue
        if command == merges[0]:
            _experts(root, ["math", "code", "a", "b", "c", "d"])
        args = shlex.split(command.replace(REMOTE_DIR, str(tmp_path / "remote" / "llama.mgit")))[1:]
        proc = invoke(*args, cwd=root)
        assert proc.returncode == 0, f"README example `{command}` failed ({proc.returncode}):\n{proc.stderr}"
        ran.append(command)
        if command == "mgit checkout -b sft":
            _fine_tune(root, seed=1)
    assert skipped == ["mgit clone --partial http://host:8790/llama work2"]
    assert len(ran) == len(commands) - 1


def test_readme_python_example_runs(tmp_path: Path, monkeypatch) -> None:
    """The README's "From Python" block: the one tensor read back, changed and committed
    updates that tensor; the model keeps every other one (issue 39)."""
    block = re.search(r"From Python:\n\n```python\n(.*?)```", README.read_text(), re.S)
    assert block, "README.md has no python block after 'From Python:'"
    monkeypatch.chdir(tmp_path)
    base = llama_state_dict(SPEC)
    write_model(tmp_path / "work" / "model", base)
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada")
    monkeypatch.setenv("GIT_AUTHOR_EMAIL", "ada@example.com")
    names: dict = {}
    exec(compile(block.group(1), "README.md", "exec"), names)
    repo = names["repo"]
    try:
        assert list(names["sd"]) == ["lm_head.weight"]
        assert [c.summary for c in repo.log()] == ["step 1000", "base"]
        committed = repo.state_dict()
        assert set(committed) == set(base)
        assert [n for n in base if not torch.equal(committed[n], base[n])] == ["lm_head.weight"]
        assert repo.status().clean
    finally:
        repo.close()
