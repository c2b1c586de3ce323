"""Experts whose deltas a sketch can stand for: low-rank fine-tunes of a small llama."""

from __future__ import annotations

import torch

from helpers.models import LlamaSpec, llama_state_dict

SPEC = LlamaSpec(layers=2, hidden=64, intermediate=128, vocab=96)


def low_rank_finetune(base: dict, seed: int, rank: int = 4) -> dict:
    """A fine-tune whose 2-D deltas are rank ``rank`` plus a little noise; 1-D tensors nudged."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in base.items():
        if t.dim() == 2:
            a = torch.randn(t.shape[0], rank, generator=g) * 0.02
            b = torch.randn(rank, t.shape[1], generator=g) * 0.02
            out[name] = t + a @ b + torch.randn(t.shape, generator=g) * 1e-4
        else:
            out[name] = t + torch.randn(t.shape, generator=g) * 1e-3
    return out


def commit_experts(repo, seed: int) -> dict:
    """main: an f32 base (returned); e1, e2: low-rank fine-tunes of it (seeds ``seed``, ``seed + 1``)."""
    base = llama_state_dict(SPEC, seed=3, dtype=torch.float32)
    repo.commit_state_dict(base, message="base")
    for k, name in enumerate(("e1", "e2")):
        repo.create_branch(name, "main")
        repo.commit_state_dict(low_rank_finetune(base, seed + k), message=name, branch=name)
    return base


def push_experts(repo, remote) -> None:
    """Push main, e1 and e2 (``commit_experts``) to a directory remote ``origin`` at ``remote``."""
    repo.remote_add("origin", str(remote))
    for branch in ("main", "e1", "e2"):
        repo.push("origin", branch)
