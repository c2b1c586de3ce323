"""The usual way to compare two versions of a model: load both with safetensors and compute the
numbers per tensor in torch float64; and how far mgit's numbers are from it, tensor by tensor.

Why: it is the yardstick of `mgit diff`, in time (it always reads both versions whole) and in
its numbers (float64 is exact for bf16 inputs, so mgit's must agree to rounding: ``check``). It
runs in a child process of its own (torch stays out of the process whose memory timed children
inherit).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

TOLERANCE = 1e-6  # largest relative difference from the baseline accepted per tensor
QUANTITIES = ("delta_norm", "cosine", "norm_a", "max_abs_delta")  # compared per tensor


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


@dataclass
class Check:
    """How one version's `mgit diff` numbers compare with the baseline's."""

    case: str
    tensors: int
    changed: int  # tensors mgit reports changed
    expected: int  # tensors the version changed
    same_set: bool
    changed_chunks: int
    worst: dict[str, float]  # quantity → largest relative difference over the tensors

    @property
    def ok(self) -> bool:
        return self.same_set and self.worst["delta_norm"] <= TOLERANCE and self.worst["cosine"] <= TOLERANCE


def check(case: str, outputs: dict[str, dict], expected: set[str], changed_chunks: int) -> Check:
    """Compare mgit's numbers (``outputs["mgit"]``, its `diff --json` tensors) with the baseline's
    (``outputs["baseline"]``), tensor by tensor."""
    mine, ref = outputs["mgit"], outputs["baseline"]
    changed = {n for n, t in mine.items() if t["status"] != "unchanged"}
    worst = {}
    for q in QUANTITIES:
        worst[q] = max(rel_diff(mine[n][q], ref[n][q]) if n in mine else math.inf for n in ref)
    return Check(case, len(ref), len(changed), len(expected), changed == expected, changed_chunks, worst)
