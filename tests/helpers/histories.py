"""Small histories that tests in several files start from (behind the fixtures ``two``,
``cloned``, ``forked``, ``forked_pushed`` and ``origin`` of tests/conftest.py, or called
directly): commits of a small model or of text files, a forked branch, a pushed remote, a clone."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from helpers.cli import Result
from helpers.models import (
    TINY,
    LlamaSpec,
    commit_model,
    frozen_finetune,
    llama_state_dict,
    small_state_dict,
    touch_later,
    tree_hashes,
    write_model,
)
from mgit import Repository

SPEC = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)
Two = tuple[Repository, str, str, dict[str, str], dict[str, str]]


def small_llama(seed: int) -> dict[str, torch.Tensor]:
    return llama_state_dict(SPEC, seed=seed)


def json_result(proc: subprocess.CompletedProcess | Result) -> dict:
    """The JSON document a command that succeeded printed."""
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def two_commits(repo: Repository) -> Two:
    """A repository with commits a and b on main (b changes the model and adds notes.txt);
    the working tree files of each."""
    a = commit_model(repo, small_llama(0), "a")
    a_files = tree_hashes(repo.root)
    write_model(repo.root / "model", frozen_finetune(small_llama(0), {0}))
    touch_later(repo.root / "model" / "model.safetensors")
    (repo.root / "notes.txt").write_text("b only\n")
    repo.add(["model", "notes.txt"])
    b = repo.commit("b")
    return repo, a, b, a_files, tree_hashes(repo.root)


@contextmanager
def pushed_and_cloned(two: Two, tmp_path: Path) -> Iterator[tuple[Repository, Repository, str, str]]:
    """``two`` pushed to a directory remote, and a clone of it."""
    repo, a, b, _, _ = two
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    clone = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "clone")
    yield repo, clone, a, b
    clone.close()


MODEL = "model/model.safetensors"


def tuned(repo: Repository, seed: int = 1) -> None:
    """Change the working model (a fine-tune of seed 0's layer 1)."""
    write_model(repo.root / "model", frozen_finetune(small_state_dict(0), {0}, seed=seed))
    touch_later(repo.root / MODEL)


def forked_history(repo: Repository) -> tuple[Repository, str, str]:
    """main at b (a fine-tune, plus notes.txt) on a; branch side at a."""
    a = commit_model(repo, small_state_dict(0), "a")
    repo.create_branch("side")
    tuned(repo)
    (repo.root / "notes.txt").write_text("b only\n")
    repo.add(["model", "notes.txt"])
    return repo, a, repo.commit("b")


def changes(repo: Repository) -> tuple[dict[str, str], dict[str, str]]:
    """(staged, unstaged): path → change, as status reports them."""
    s = repo.status()
    return {f.path: f.change for f in s.staged}, {f.path: f.change for f in s.unstaged}


def sharded_branches(repo: Repository) -> None:
    """main at v1 and branch b at v2, each a tiny model in two shards; main checked out."""
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    repo.checkout(create_branch="b")
    commit_model(repo, llama_state_dict(TINY, seed=2), "v2", shards=2)
    repo.checkout("main")


def text_commit(repo: Repository, files: dict[str, str], message: str) -> str:
    """Write text files (path → text), add them and commit; the commit's id."""
    for rel, text in files.items():
        (repo.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / rel).write_text(text)
    repo.add(list(files))
    return repo.commit(message)


def pushed_text(repo: Repository, tmp_path: Path) -> tuple[Repository, str]:
    """One text commit on main, pushed to a directory remote origin; (repo, that commit)."""
    first = text_commit(repo, {"a.txt": "a\n"}, "a")
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    return repo, first
