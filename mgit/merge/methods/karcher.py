"""``karcher``: the inputs' Karcher (Riemannian) mean on the unit sphere, rescaled by their mean
norm (mergekit's ``karcher``, https://arxiv.org/abs/2603.04972); no base, every input an expert."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod
from mgit.merge.params import Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling


class Karcher(MergeMethod):
    """Equal-weight Karcher mean of the K inputs' directions (see :func:`karcher_mean`), times the
    mean of their norms. One input is returned as it is. A base named in a mergekit config is
    merely one more input there (mergekit ignores the base role); here too."""

    name = "karcher"
    summary = "Riemannian mean of the inputs' directions, times their mean norm"
    params = (
        Param("max_iter", int, Scope.GLOBAL, 10, doc="gradient steps at most"),
        Param("tol", float, Scope.GLOBAL, 1e-5, doc="norms, angles and steps below it count as 0"),
    )
    needs_base = False
    min_experts = 1
    max_experts = None

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        if len(experts) == 1:
            return experts[0]
        alphas = [1.0 / len(experts)] * len(experts)
        return karcher_mean(experts, alphas, p["max_iter"], p["tol"])


def karcher_mean(tensors: Sequence[torch.Tensor], alphas: Sequence[float], max_iter: int, tol: float) -> torch.Tensor:
    """The weighted Karcher mean on the unit sphere of the flattened tensors, as mergekit computes it.

    Norms in float32 (float64 for float64 inputs), everything else in the tensors' dtype. Inputs
    whose norm is at most ``tol`` drop out of the direction (the others' weights renormalised) but
    still count in the scale Σ alpha_k·|x_k|; all of them that small: zeros (x·0, summed). The start
    is the normalised weighted mean of the unit vectors (the first unit vector when that is ~0);
    each step moves along the weighted sum of log maps, inputs within ``tol`` radians skipped,
    until the step's norm is below ``tol`` or ``max_iter`` steps.
    """
    import torch

    norm_dtype = torch.float64 if tensors[0].dtype == torch.float64 else torch.float32
    norms = [torch.linalg.vector_norm(t.to(norm_dtype)) for t in tensors]
    valid = [k for k, norm in enumerate(norms) if norm.item() > tol]
    if not valid:
        return sum(t * 0 for t in tensors)  # type: ignore[return-value]  # x·0 summed: zeros, NaN where an input has one
    units = [_unit(tensors[k], norms[k]) for k in valid]
    total = sum(alphas[k] for k in valid)
    weights = [alphas[k] / total for k in valid]
    mean = _start(units, weights, norm_dtype, tol)
    for _ in range(max_iter):
        tangent = _log_sum(mean, units, weights, tol)
        step = torch.linalg.vector_norm(tangent.to(norm_dtype))
        if step.item() < tol:
            break
        mean = (torch.cos(step) * mean + torch.sin(step) * (tangent / step)).to(mean.dtype)
        length = torch.linalg.vector_norm(mean.to(norm_dtype))
        if length.item() > tol:
            mean = (mean / length).to(mean.dtype)
    scale = sum(alpha * norm for alpha, norm in zip(alphas, norms, strict=True))
    return scale * mean


def _unit(tensor: torch.Tensor, norm: torch.Tensor) -> torch.Tensor:
    """``tensor / norm`` in the tensor's dtype (zeros for a zero norm, with a negative ``tol``)."""
    import torch

    return torch.zeros_like(tensor) if norm.item() == 0.0 else (tensor / norm).to(tensor.dtype)


def _start(units: list[torch.Tensor], weights: list[float], norm_dtype: torch.dtype, tol: float) -> torch.Tensor:
    """The weighted mean of the unit vectors, normalised; the first unit vector where it is ~0."""
    import torch

    mean = torch.zeros_like(units[0])
    for weight, unit in zip(weights, units, strict=True):
        mean += weight * unit
    length = torch.linalg.vector_norm(mean.to(norm_dtype))
    return units[0].clone() if length.item() < tol else (mean / length).to(mean.dtype)


def _log_sum(mean: torch.Tensor, units: list[torch.Tensor], weights: list[float], tol: float) -> torch.Tensor:
    """Σ weight_k · log_mean(unit_k): the tangent step towards the units (angles below ``tol`` skipped)."""
    import torch

    tangent = torch.zeros_like(mean)
    for weight, unit in zip(weights, units, strict=True):
        cos = torch.clamp(torch.dot(mean.flatten(), unit.flatten()), -1.0, 1.0)
        theta = torch.arccos(cos)
        if theta.item() < tol:
            continue
        tangent += weight * (theta / torch.sin(theta)) * (unit - cos * mean)
    return tangent
