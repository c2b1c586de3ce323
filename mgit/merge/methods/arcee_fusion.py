"""``arcee_fusion``: take the expert's change only where it matters most, by an outlier threshold on
an importance score (mergekit's ``arcee_fusion``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError
from mgit.merge.methods.base import MergeMethod

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling

_FUSION_EPS = 1e-8  # added to both softmaxes before their ratio (mergekit's)
QUANTILE_SAMPLE_SIZE = 1_000_000  # larger tensors: quantiles of this many elements drawn at random


class ArceeFusion(MergeMethod):
    """base + (expert − base) · mask, in the working dtype with mergekit's operations in its order.

    The importance of each element is |expert − base| times the KL divergence of the expert's
    softmax from the base's along the last dimension (each + 1e-8), one value per row. The mask is
    1 where the importance reaches median + 1.5·(q3 − q1), the upper Tukey fence; the quantiles
    are the sorted scores at index ⌊q·(n − 1)⌋ (q in float32). The mask is float32, so a
    half-precision merge comes out float32, as mergekit's does (``--out-dtype`` casts it).

    Over 1,000,000 elements, the quantiles are taken from 1,000,000 scores drawn with replacement
    (mergekit draws them from torch's global generator): the method is random there and draws
    from the merge's seeded generator, as the sparsifiers do. Smaller tensors draw nothing.
    Exactly one expert and a base; whole-tensor statistics, so not elementwise.
    """

    name = "arcee_fusion"
    summary = "the expert's change where its importance is an outlier (above the upper Tukey fence)"
    params = ()
    needs_base = True
    min_experts = 1
    max_experts = 1
    random = True

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        assert base is not None
        if s.masks is not None:
            raise BadInputError(f"{s.where}: draws no keep-masks; give a seeded generator instead")
        (expert,) = experts
        scores = importance(expert, base)
        mask = (scores >= upper_fence(scores, s)).float()
        return base + (expert - base) * mask


def importance(expert: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
    """|expert − base| times KL(softmax(expert) ‖ softmax(base)) of its row (the last dimension)."""
    import torch
    import torch.nn.functional as F

    diff = (expert - base).abs()
    p = F.softmax(expert, dim=-1) + _FUSION_EPS
    q = F.softmax(base, dim=-1) + _FUSION_EPS
    return diff * torch.sum(p * torch.log(p / q), dim=-1, keepdim=True)


def upper_fence(scores: torch.Tensor, s: Sampling) -> torch.Tensor:
    """median + 1.5 · (q3 − q1) of the scores (of a sample of them, over QUANTILE_SAMPLE_SIZE)."""
    import torch

    flat = scores.reshape(-1)
    if flat.numel() > QUANTILE_SAMPLE_SIZE:
        flat = flat[s.indices(flat.numel(), QUANTILE_SAMPLE_SIZE)]
    ordered, _ = torch.sort(flat)
    at = (torch.tensor([0.25, 0.5, 0.75]) * (ordered.numel() - 1)).long()
    q1, median, q3 = ordered[at]
    return median + 1.5 * (q3 - q1)
