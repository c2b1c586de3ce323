"""Small histories that tests in several directories start from (tests/ops, tests/cli; the
fixtures ``two`` and ``cloned`` in tests/conftest.py): two commits on main, and that repository
pushed to a directory remote and cloned."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from helpers.cli import Result
from helpers.models import (
    LlamaSpec,
    commit_model,
    frozen_finetune,
    llama_state_dict,
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
