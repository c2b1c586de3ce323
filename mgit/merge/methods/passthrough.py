"""``passthrough``: the single input, optionally scaled (mergekit's ``passthrough``); no base."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod, Weights
from mgit.merge.params import Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling


class Passthrough(MergeMethod):
    """The single input, multiplied by ``scale`` when given (the result may alias the input)."""

    name = "passthrough"
    summary = "the single input, optionally scaled"
    params = (Param("scale", float, Scope.EXPERT, None, nullable=True, doc="optional factor"),)
    needs_base = False
    min_experts = 1
    max_experts = 1
    elementwise = True
    affine = True

    def keeps_base_where_unchanged(self, params: Mapping[str, Any]) -> bool:
        """Unscaled, the result is the input itself (the reference a merge without a base starts from)."""
        return params.get("scale", (None,))[0] is None

    def effective_weights(self, params: Mapping[str, Any], count: int) -> Weights:
        scale = params.get("scale", (None,))[0]
        return Weights((1.0 if scale is None else float(scale),), 0.0)

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        (tensor,) = experts
        scale = p["scale"][0]
        return tensor if scale is None else tensor * scale
