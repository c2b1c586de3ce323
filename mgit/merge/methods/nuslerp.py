"""``nuslerp``: spherical interpolation between two experts, or between their offsets from a base
when one is named (mergekit's ``nuslerp``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.params import REQUIRED, Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling

_NUSLERP_NORM_FLOOR = 1e-7  # a vector's norm is clamped to it before dividing (mergekit's)
_NUSLERP_COLINEAR_EPS = 1e-8  # colinear where 1 - cos² <= eps²: linear interpolation there
_NUSLERP_ZERO_TOTAL = 1e-6  # weights summing to less than this in magnitude interpolate halfway


def nuslerp_t(weights: tuple[float, ...]) -> float:
    """The interpolation factor from the two experts' weights: w₁ / (w₀ + w₁), 0.5 when the sum
    is (nearly) zero."""
    total = sum(weights)
    return 0.5 if abs(total) < _NUSLERP_ZERO_TOTAL else weights[1] / total


def nuslerp(t: float, v0: torch.Tensor, v1: torch.Tensor, row_wise: bool, flatten: bool) -> torch.Tensor:
    """SLERP from v0 (t = 0) to v1 (t = 1) over the whole flattened tensors (``flatten``), else
    per vector along the last dimension, or along the first with ``row_wise`` (each column of a
    matrix then interpolates on its own). In the tensors' dtype, with mergekit's operations in
    its order: vectors normalised by their norm (clamped at 1e-7), cos = Σ u₀·u₁ clamped to
    [-1, 1]; where 1 - cos² <= 1e-16 a linear interpolation, else
    (sin((1 - t)θ)·v0 + sin(tθ)·v1) / sin θ."""
    import torch

    shape = v0.shape
    if flatten:
        v0, v1 = v0.reshape(-1), v1.reshape(-1)
    elif row_wise:
        v0, v1 = v0.transpose(0, -1), v1.transpose(0, -1)
    u0 = v0 / torch.norm(v0, dim=-1, keepdim=True).clamp(min=_NUSLERP_NORM_FLOOR)
    u1 = v1 / torch.norm(v1, dim=-1, keepdim=True).clamp(min=_NUSLERP_NORM_FLOOR)
    cos = torch.sum(u0 * u1, dim=-1, keepdim=True).clamp(-1, 1)
    colinear = (1 - cos.square()) <= _NUSLERP_COLINEAR_EPS**2
    theta = torch.acos(torch.where(colinear, 0, cos))
    spherical = (torch.sin((1 - t) * theta) * v0 + torch.sin(t * theta) * v1) / torch.sin(theta)
    result = torch.where(colinear, (1 - t) * v0 + t * v1, spherical)
    if row_wise and not flatten:
        result = result.transpose(0, -1)
    return result.reshape(shape)


class NuSlerp(MergeMethod):
    """NuSLERP of two experts at t = w₁ / (w₀ + w₁) (see :func:`nuslerp`); with a base, of their
    offsets from it, added back to the base. The base is optional: used when one is named
    (``--base``, a config's ``base_model``), as mergekit uses it when its config names one.
    It compares whole tensors or rows, so it is not elementwise."""

    name = "nuslerp"
    summary = "spherical interpolation of two experts (of their offsets from a base, if one is named)"
    params = (
        Param("weight", float, Scope.EXPERT, REQUIRED, doc="weight of each expert; t = w1 / (w0 + w1)"),
        Param("nuslerp_row_wise", bool, Scope.GLOBAL, False, doc="interpolate each column vector on its own"),
        Param("nuslerp_flatten", bool, Scope.GLOBAL, True, doc="interpolate the whole flattened tensors"),
    )
    needs_base = False
    base_optional = True
    min_experts = 2
    max_experts = 2

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        t = nuslerp_t(tuple(float(w) for w in params["weight"]))
        return Weights((1 - t, t), 1.0)

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        t = nuslerp_t(p["weight"])
        first, second = experts
        row_wise, flatten = p["nuslerp_row_wise"], p["nuslerp_flatten"]
        if base is None:
            return nuslerp(t, first, second, row_wise, flatten)
        return base + nuslerp(t, first - base, second - base, row_wise, flatten)
