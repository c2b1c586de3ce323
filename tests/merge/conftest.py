"""Fixtures the merge tests share."""

from __future__ import annotations

import pytest
from helpers.models import commit_model, frozen_finetune, llama_state_dict


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
