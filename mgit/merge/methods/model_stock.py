"""``model_stock``: move from the base towards the experts' mean by a ratio from their pairwise
angles (mergekit's ``model_stock``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod
from mgit.merge.params import Param, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling


class ModelStock(MergeMethod):
    """Model Stock: move from the base towards the experts' average by t = k cos / (1 + (k - 1) cos).

    cos is the mean, over all expert pairs, of the cosine between their offsets from the base
    (norm product clamped below at 1e-6, cosine clamped to [-1, 1]); over the whole flattened tensor,
    or with ``filter_wise`` per row along the last dimension (a 1-D tensor is one row). Where
    |1 + (k - 1) cos| < 1e-6 the base is kept (t = 0). Everything in the working dtype, as mergekit.
    """

    name = "model_stock"
    summary = "move towards the experts' mean by a ratio from their pairwise angles"
    params = (Param("filter_wise", bool, Scope.GLOBAL, False, doc="one ratio per row instead of per tensor"),)
    needs_base = True
    min_experts = 2
    max_experts = None

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        import torch

        assert base is not None
        w0, ws = base, list(experts)
        if p["filter_wise"]:
            if w0.dim() == 1:
                w0, ws = w0.unsqueeze(0), [w.unsqueeze(0) for w in ws]
        else:
            w0, ws = w0.reshape(-1), [w.reshape(-1) for w in ws]
        offsets = [w - w0 for w in ws]
        cosines = []
        for i, first in enumerate(offsets):
            for second in offsets[i + 1 :]:
                norms = torch.norm(first, dim=-1) * torch.norm(second, dim=-1)
                cosines.append(((first * second).sum(dim=-1) / norms.clamp(min=1e-6)).clamp(-1, 1))
        cos = torch.stack(cosines).mean(dim=0).unsqueeze(-1)
        k = len(ws)
        denominator = 1 + (k - 1) * cos
        singular = denominator.abs() < 1e-6
        ratio = (k * cos) / torch.where(singular, torch.ones_like(denominator), denominator)
        t = torch.where(singular, torch.zeros_like(cos), ratio)
        average = sum(ws) / k  # left-to-right sum, as mergekit's Python sum()
        return (t * average + (1 - t) * w0).reshape(base.shape)
