"""``slerp``: spherical interpolation between the base and one expert (mergekit's ``slerp``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.params import REQUIRED, Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling

_SLERP_CHUNK = 1024 * 1024  # elements per chunk, as mergekit: bounds float32 scratch and fixes reduction order
_SLERP_DOT_THRESHOLD = 0.9995
_SLERP_NORM_EPS = 1e-8


def slerp(t: float, v0: torch.Tensor, v1: torch.Tensor) -> torch.Tensor:
    """Spherical interpolation between whole tensors v0 (t = 0) and v1 (t = 1).

    Follows mergekit's ``slerp`` exactly: computed in float32 (float64 for float64 v0) over the
    flattened tensors; each norm is the norm of per-chunk norms (chunks of 2**20 elements); the
    cosine is the sum of per-chunk dot products of the *normalised* vectors (a norm <= 1e-8 is
    replaced by 1), clamped to [-1, 1]. When |cos| > 0.9995 (nearly colinear or antipodal) it falls
    back to linear interpolation (1 - t) v0 + t v1; otherwise
    sin((1 - t) theta) / sin(theta) v0 + sin(t theta) / sin(theta) v1 on the un-normalised inputs.
    The result has v0's dtype.
    """
    import torch

    work = torch.float64 if v0.dtype == torch.float64 else torch.float32
    a = v0.reshape(1, -1)
    b = v1.reshape(1, -1)
    tt = torch.tensor([t], dtype=work, device=v0.device).reshape(-1, 1)
    n = a.shape[1]
    if n == 0:
        return ((1 - tt) * a + tt * b).reshape(v0.shape).to(v0.dtype)
    chunks = [slice(start, start + _SLERP_CHUNK) for start in range(0, n, _SLERP_CHUNK)]

    def norm(x: torch.Tensor) -> torch.Tensor:
        parts = [torch.linalg.vector_norm(x[:, c].to(work), dim=1, keepdim=True) for c in chunks]
        value = torch.linalg.vector_norm(torch.stack(parts), dim=0)
        return torch.where(value > _SLERP_NORM_EPS, value, 1)

    norm_a, norm_b = norm(a), norm(b)
    dots = [((a[:, c].to(work) / norm_a) * (b[:, c].to(work) / norm_b)).sum(dim=1, keepdim=True) for c in chunks]
    cos = torch.stack(dots).sum(dim=0).clamp(-1, 1)
    colinear = cos.abs() > _SLERP_DOT_THRESHOLD
    theta = torch.acos(torch.where(colinear, 0, cos))
    sin_theta = torch.sin(theta)
    coef_a = torch.where(colinear, 1 - tt, torch.sin((1 - tt) * theta) / sin_theta)
    coef_b = torch.where(colinear, tt, torch.sin(tt * theta) / sin_theta)
    out = torch.empty_like(a)
    for c in chunks:
        out[:, c] = coef_a * a[:, c].to(work) + coef_b * b[:, c].to(work)
    return out.reshape(v0.shape)


class Slerp(MergeMethod):
    """SLERP from the base (t = 0) to the single expert (t = 1); see :func:`slerp`. It compares
    whole tensors (their norms and angle), so it is not elementwise."""

    name = "slerp"
    summary = "spherical interpolation between base and one expert"
    params = (Param("t", float, Scope.GLOBAL, REQUIRED, doc="0 = base, 1 = the expert"),)
    needs_base = True
    min_experts = 1
    max_experts = 1

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        return Weights((float(params["t"]),), 1.0)

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        assert base is not None
        return slerp(p["t"], base, experts[0])
