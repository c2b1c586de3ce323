"""``nearswap``: take the expert's value where it lies near the base's (mergekit's ``nearswap``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod
from mgit.merge.params import REQUIRED, Param, Range, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling

_NEARSWAP_MIN_DISTANCE = 1e-6  # mergekit's floor on |base - expert|, so equal values divide by it


class NearSwap(MergeMethod):
    """Per element, w = clamp(t / max(|base - expert|, 1e-6), 0, 1), then w·expert + (1 - w)·base:
    where the two differ by at most ``t`` the expert's value is taken whole, farther apart it
    weighs t / distance. Elementwise, in the working dtype, with mergekit's operations in its order
    (so bf16 rounds where mergekit's does)."""

    name = "nearswap"
    summary = "the expert's value where it lies within t of the base's, interpolated beyond"
    params = (
        Param(
            "t",
            float,
            Scope.GLOBAL,
            REQUIRED,
            range=Range(0.0, None, meaning="distance from the base within which the expert's value is taken"),
            doc="distance threshold",
        ),
    )
    needs_base = True
    min_experts = 1
    max_experts = 1
    elementwise = True

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        import torch

        assert base is not None
        (expert,) = experts
        distance = torch.abs(base - expert).clamp(min=_NEARSWAP_MIN_DISTANCE)
        weight = (p["t"] / distance).clamp(min=0, max=1)
        return weight * expert + (1 - weight) * base
