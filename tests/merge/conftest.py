"""Fixtures the merge tests share."""

from __future__ import annotations

import functools

import pytest
from helpers.models import THREE_EXPERTS, commit_model, commit_uneven, frozen_finetune, llama_state_dict

from mgit.merge import engine
from mgit.model import ingest
from mgit.model.chunking import chunk_size_for


@pytest.fixture
def experts(repo):
    """main: a bf16 base; math and code: fine-tunes of it."""
    base = llama_state_dict(seed=3)
    commit_model(repo, base, "base")
    for i, name in enumerate(("math", "code")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, frozen_finetune(base, {i}, seed=30 + i), name)
    repo.checkout("main")
    return repo


@pytest.fixture
def small_chunks(monkeypatch):
    """Chunks of ~4 KB: every tensor has several, so a budget chooses within tensors too."""
    small = functools.partial(chunk_size_for, target=4000)
    monkeypatch.setattr(ingest, "chunk_size_for", small)
    monkeypatch.setattr(engine, "chunk_size_for", small)


@pytest.fixture
def three_uneven(repo, small_chunks):
    """main: a bf16 base; math, code and chat: uneven fine-tunes of it (seeds 50…52), small chunks."""
    commit_uneven(repo, THREE_EXPERTS, 50)
    return repo


@pytest.fixture
def started(repo):
    """A repository with one commit and no model (a merge config's models are directories)."""
    (repo.root / "README.md").write_text("merges\n")
    repo.add(["README.md"])
    repo.commit("start")
    return repo
