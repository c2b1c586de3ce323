"""``ram`` and ``ramplus_tl``: Reinforced Agent Merging, which keeps a change only one expert made
whole and averages changes several made (mergekit's, https://arxiv.org/abs/2601.13572)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mgit.merge.methods.base import MergeMethod
from mgit.merge.params import Param, Range, Scope

if TYPE_CHECKING:
    import torch

    from mgit.merge.sparsify import Sampling

_EPSILON = "|Δ| above it counts as a change"


class Ram(MergeMethod):
    """RAM on the deltas Δ_k = expert_k − base, flattened and stacked (the working dtype, as
    mergekit): an element of Δ_k *counts* where |Δ_k| > ``epsilon``; where exactly one expert's
    counts, its delta is taken whole, where several do, their deltas are averaged over that count,
    and where none does the base stays. With no expert, the base.

    The counts compare the whole stack, so it is not elementwise; nor does it read sketches, whose
    dense reconstruction would make every element count for every expert (a plain mean)."""

    name = "ram"
    summary = "a change one expert made taken whole, changes several made averaged"
    params: tuple[Param, ...] = (
        Param("epsilon", float, Scope.GLOBAL, 1e-5, range=Range(0.0, None, meaning=_EPSILON), doc=_EPSILON),
    )
    needs_base = True
    min_experts = 0
    max_experts = None
    accepts_sketches = False

    def merge(
        self, base: torch.Tensor | None, experts: list[torch.Tensor], p: Mapping[str, Any], s: Sampling
    ) -> torch.Tensor:
        assert base is not None
        if not experts:
            return base
        c = changes(experts, base, p["epsilon"])
        own = c.kept * c.unique
        scale = self.own_scale(c, p)
        if scale is not None:
            own = own * scale.unsqueeze(-1)
        merged = (own + c.kept * c.overlap / c.counts.clamp(min=1)).sum(dim=0, keepdim=True)
        return base + merged.reshape_as(base)

    def own_scale(self, c: Changes, p: Mapping[str, Any]) -> torch.Tensor | None:
        """Each expert's factor on the changes only it made (None: taken as they are)."""
        return None


class RamPlusTl(Ram):
    """RAM+ (tensor-local): as :class:`Ram`, but expert k's unique changes are scaled by
    λ_k = 1 + r · clamp(ρ_k, 0, alpha), where ρ_k is the number of its elements that count and are
    shared with another expert over the number that are its own (clamped at ``epsilon``), both
    counted in this tensor. λ is float32, so a half-precision merge comes out float32, as
    mergekit's does (``--out-dtype`` casts it)."""

    name = "ramplus_tl"
    summary = "ram, with each expert's own changes scaled up by how much it shares (per tensor)"
    params = (
        Param("r", float, Scope.GLOBAL, 0.1, doc="how much the shared share scales unique changes"),
        Param("alpha", float, Scope.GLOBAL, 0.2, doc="the most the shared/unique ratio counts"),
        Param(
            "epsilon",
            float,
            Scope.GLOBAL,
            1e-5,
            range=Range(0.0, None, low_open=True, meaning=f"{_EPSILON}; the floor of the unique count"),
            doc=_EPSILON,
        ),
    )

    def own_scale(self, c: Changes, p: Mapping[str, Any]) -> torch.Tensor | None:
        """λ_k (float32: the counts' ratio is)."""
        shared = (c.counted & c.overlap).sum(dim=1)
        own = (c.counted & c.unique).sum(dim=1)
        ratio = shared / own.clamp(min=p["epsilon"])
        return 1 + p["r"] * ratio.clamp(min=0, max=p["alpha"])


@dataclass(frozen=True)
class Changes:
    """The experts' flattened deltas and which elements of them count as changes."""

    kept: torch.Tensor  # (K, n): the deltas, zero where they do not count
    counted: torch.Tensor  # (K, n) bool: |Δ| > epsilon
    counts: torch.Tensor  # (1, n): how many experts changed each element
    overlap: torch.Tensor  # (1, n) bool: several did
    unique: torch.Tensor  # (1, n) bool: exactly one did


def changes(experts: list[torch.Tensor], base: torch.Tensor, epsilon: float) -> Changes:
    """RAM's shared first step (mergekit's ``_prepare_ram_vectors``), in the working dtype."""
    import torch

    deltas = torch.stack([expert - base for expert in experts], dim=0).view(len(experts), -1)
    counted = deltas.abs() > epsilon
    counts = counted.sum(dim=0, keepdim=True)
    return Changes(deltas * counted, counted, counts, counts > 1, counts == 1)
