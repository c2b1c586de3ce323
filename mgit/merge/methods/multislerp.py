"""``multislerp``: a weighted mean of K experts on the hypersphere, or of their offsets from a base
when one is named (mergekit's ``multislerp``, https://goddard.blog/posts/multislerp-wow-what-a-cool-idea)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError
from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.params import REQUIRED, Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling


class MultiSlerp(MergeMethod):
    """Barycentric interpolation on the sphere, in the working dtype with mergekit's operations in
    its order. The inputs (with a base: their offsets from it) are flattened, each divided by its
    norm + ``eps``; their weighted mean direction m (normalised) is the tangent point, each unit
    vector u is projected onto the tangent plane there (u − (u·m)·m), the weighted sum t of those
    projections is mapped back by the exponential map (m·cos|t| + t·sin|t|/|t|, |t| taken + eps),
    and the result is scaled by the weighted mean of the norms (plus the base, when there is one).

    Weights are the working dtype's numbers, divided by their sum with ``normalize_weights``. One
    expert is returned as it is (the base unused). Where the weighted mean direction is shorter
    than ``eps`` (antipodal inputs balanced by their weights), two experts are interpolated
    linearly; more are refused, as mergekit raises. The base is optional, as nuslerp's."""

    name = "multislerp"
    summary = "weighted mean of K experts on the hypersphere (of their offsets from a base, if one is named)"
    params = (
        Param("weight", float, Scope.EXPERT, REQUIRED, doc="weight of each expert"),
        Param("normalize_weights", bool, Scope.GLOBAL, True, doc="divide the weights by their sum"),
        Param("eps", float, Scope.GLOBAL, 1e-8, doc="added to norms before dividing by them"),
    )
    needs_base = False
    base_optional = True
    min_experts = 1
    max_experts = None

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        weights = tuple(float(w) for w in params["weight"])
        total = sum(weights)
        if params["normalize_weights"] and total != 0:
            weights = tuple(w / total for w in weights)
        return Weights(weights, 1.0)

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        import torch

        if len(experts) == 1:
            return experts[0]
        eps = p["eps"]
        stacked = torch.stack(experts, dim=0)
        if base is not None:
            stacked -= base
        flat = stacked.view(stacked.shape[0], -1)
        weights = torch.tensor(p["weight"], dtype=stacked.dtype, device=stacked.device)
        if p["normalize_weights"]:
            weights = weights / weights.sum()
        norms = torch.norm(flat, dim=-1, keepdim=True)
        units = flat / (norms + eps)
        mean = (units * weights.view(-1, 1)).sum(0)
        mean_norm = torch.norm(mean)
        if mean_norm < eps:
            if len(experts) != 2:
                raise BadInputError(
                    f"{s.where}: the weighted mean of the inputs' directions is zero (antipodal inputs whose "
                    "weights balance out); give other weights"
                )
            result = (stacked[0] * weights[0] + stacked[1] * weights[1]).view(stacked.shape[1:])
            return result + base if base is not None else result
        mean = mean / mean_norm
        tangents = units - (units * mean).sum(-1, keepdim=True) * mean
        tangent = (tangents * weights.view(-1, 1)).sum(0)
        length = torch.norm(tangent) + eps
        direction = mean * torch.cos(length) + tangent * (torch.sin(length) / length)
        result = (direction * (norms.squeeze(-1) * weights).sum()).view(stacked.shape[1:])
        return result + base if base is not None else result
