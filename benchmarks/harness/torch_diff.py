"""The usual way to compare two versions of a model: load both with safetensors and compute the
numbers per tensor in torch float64; and how far two such numbers are apart.

Why: it is the yardstick of `mgit diff`, in time (it always reads both versions whole) and in
its numbers (float64 is exact for bf16 inputs, so mgit's must agree to rounding). It runs in a
child process of its own (torch stays out of the process whose memory timed children inherit).
"""

from __future__ import annotations

import math
from pathlib import Path


def load_and_compare(dir_a: Path, dir_b: Path) -> dict[str, dict[str, float]]:
    """Load each shard of both versions with load_file; per tensor, in float64,
    ‖B−A‖, ‖A‖, ‖B‖, cos(A, B) and max|B−A|."""
    import torch
    from safetensors.torch import load_file

    out = {}
    for path_a in sorted(dir_a.glob("*.safetensors")):
        sd_a, sd_b = load_file(path_a), load_file(dir_b / path_a.name)
        for name, tensor_a in sd_a.items():
            a = tensor_a.to(torch.float64).flatten()
            b = sd_b[name].to(torch.float64).flatten()
            d = b - a
            norm_a, norm_b = a.norm().item(), b.norm().item()
            out[name] = {
                "delta_norm": d.norm().item(),
                "norm_a": norm_a,
                "norm_b": norm_b,
                "cosine": torch.dot(a, b).item() / (norm_a * norm_b),
                "max_abs_delta": d.abs().max().item(),
            }
        del sd_a, sd_b
    return out


def rel_diff(x: float | None, y: float | None) -> float:
    """|x − y| / max(|x|, |y|); 0 when both are 0, inf when one is missing."""
    if x is None or y is None:
        return math.inf
    top = max(abs(x), abs(y))
    return abs(x - y) / top if top > 0 else 0.0
