"""``sce``: select the deltas' most varying elements, weight each expert by its delta's energy,
erase minority signs (mergekit's ``sce``, https://arxiv.org/abs/2408.07990)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod
from mgit.merge.params import Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling

_WEIGHT_SUM_FLOOR = 1e-6  # below it the experts weigh the same
_DIVISOR_FLOOR = 1e-6  # the sum of the kept weights is clamped to it


class Sce(MergeMethod):
    """SCE on the deltas Δ_k = expert_k − base, stacked along a new first axis (the working dtype
    throughout, as mergekit):

    1. *Select* (``select_topk`` < 1): keep, in every delta, the elements where the variance across
       the experts (population variance) is among the ``int(nonzero · select_topk)`` largest, the
       count taken over the variance's non-zero elements (in float32, as torch multiplies a count
       by a float), ties broken by ``torch.topk``; ≤ 0 keeps nothing.
    2. *Calculate*: expert k weighs mean(Δ_k²) / Σ_j mean(Δ_j²) (over the whole tensor, the sum
       taken as a Python float), or 1/K when that sum is below 1e-6.
    3. *Erase*: where an expert's sign differs from the sign of Σ_k Δ_k (≥ 0 counts as +), its
       weight is 0 there; the result is base + Σ w·Δ / max(Σ w, 1e-6), both sums over the stack.

    Whole-tensor statistics (energies, the top-k), so not elementwise. ``int8_mask`` only changes
    the dtype of the masks, never a value. With no expert, the base.
    """

    name = "sce"
    summary = "top-variance selection, energy weights, minority signs erased"
    params = (
        Param("int8_mask", bool, Scope.GLOBAL, False, doc="masks as int8 (memory only)"),
        Param("select_topk", float, Scope.GLOBAL, 1.0, doc="fraction of elements kept by variance"),
    )
    needs_base = True
    min_experts = 0
    max_experts = None

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        import torch

        assert base is not None
        if not experts:
            return base
        mask_dtype = torch.int8 if p["int8_mask"] else base.dtype
        deltas = torch.stack([expert - base for expert in experts], dim=0)
        if p["select_topk"] < 1:
            deltas = deltas * top_variance_mask(deltas, p["select_topk"], mask_dtype).unsqueeze(0)
        weights = energy_weights(deltas)
        weights = weights.reshape(weights.shape + (1,) * (deltas.dim() - 1))
        kept = weights * majority_sign_agrees(deltas, mask_dtype)
        merged = (deltas * kept).sum(dim=0)
        return base + merged / kept.sum(dim=0).clamp(min=_DIVISOR_FLOOR)


def top_variance_mask(deltas: torch.Tensor, fraction: float, mask_dtype: torch.dtype) -> torch.Tensor:
    """1 where the variance across experts is among the top ``fraction`` of its non-zero elements."""
    import torch

    if fraction <= 0:
        return torch.zeros_like(deltas[0], dtype=mask_dtype)
    if fraction >= 1:
        return torch.ones_like(deltas[0], dtype=mask_dtype)
    variance = torch.var(deltas, dim=0, unbiased=False)
    k = int(torch.count_nonzero(variance) * fraction)
    mask = torch.zeros_like(variance, dtype=mask_dtype)
    if k > 0:
        _, top = torch.topk(variance.abs().view(-1), k=k, largest=True)
        mask.view(-1)[top] = 1
    return mask


def energy_weights(deltas: torch.Tensor) -> torch.Tensor:
    """Each expert's share of the deltas' mean squares (equal shares when they are all ~0)."""
    import torch

    energies = deltas.square().reshape(deltas.shape[0], -1).mean(dim=1)
    total = torch.sum(energies).item()
    if abs(total) < _WEIGHT_SUM_FLOOR:
        return torch.ones_like(energies) / energies.shape[0]
    return energies / total


def majority_sign_agrees(deltas: torch.Tensor, mask_dtype: torch.dtype) -> torch.Tensor:
    """Where each delta's sign is the sign of the deltas' sum (a zero sum elects +): TIES's
    election by mass, unweighted."""
    signs = deltas.sign().to(mask_dtype)
    majority = (deltas.sum(dim=0) >= 0).to(mask_dtype) * 2 - 1
    return signs == majority
