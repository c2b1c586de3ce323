"""A stored sketch as a budgeted merge sees it: what each prefix of its levels (rank blocks
or DARE tiers) costs and captures (an offer), the prefix a plan chose (a use), and the delta
it stands for, rebuilt from the blocks read. Plain data over manifests."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from mgit.merge.sketch.record import TensorSketch
from mgit.model.manifest import TensorManifest


@dataclass(frozen=True)
class SketchOffer:
    """One expert tensor's stored sketch: its record and, per level, the manifests of the
    blocks that level adds (Aᵀ and Bᵀ rows, or a tier's values) and their stored bytes."""

    sketch: TensorSketch
    blocks: tuple[tuple[TensorManifest, ...], ...]
    block_costs: tuple[int, ...]  # per level: its blocks' stored bytes

    def options(self) -> list[tuple[int, int, float]]:
        """(level, stored bytes, value) of every prefix of the levels a merge can read."""
        out, cost = [], 0
        for end, block_cost in zip(self.sketch.ends(), self.block_costs, strict=True):
            cost += block_cost
            out.append((end, cost, self.sketch.captured(end)))
        return out

    def use(self, level: int, chunks: tuple[int, ...]) -> SketchUse:
        """The use of the prefix ending at ``level`` (one of :meth:`options`) in place of ``chunks``."""
        n = self.sketch.ends().index(level) + 1
        return SketchUse(level, self.blocks[:n], chunks, sum(self.block_costs[:n]), self.sketch)


@dataclass(frozen=True)
class SketchUse:
    """An expert tensor read as its sketch's prefix ending at ``rank`` (a rank, or a DARE
    tier count) instead of its exact ``chunks`` (those differing from the base: the sketched
    delta is dense, so each is computed)."""

    rank: int
    blocks: tuple[tuple[TensorManifest, ...], ...]
    chunks: tuple[int, ...]
    cost: int  # stored bytes of the blocks read
    sketch: TensorSketch

    @property
    def captured(self) -> float:
        """The planner's value of it, in units of ‖Δ‖² (:meth:`TensorSketch.captured`)."""
        return self.sketch.captured(self.rank)

    def manifests(self) -> list[TensorManifest]:
        return [m for level in self.blocks for m in level]

    def label(self) -> str:
        """How a plan prints it: ``r8`` (rank 8), or ``p=6.2%`` (a DARE keep rate)."""
        if self.sketch.rates:
            return f"p={self.sketch.rates[self.rank - 1] * 100:.2g}%"
        return f"r{self.rank}"

    def reconstruction(self, arrays: list[list[np.ndarray]]) -> Delta:
        """The sketched delta from each level's blocks as read (float32, in :attr:`blocks`' order)."""
        if self.sketch.rates:
            from mgit.merge.sketch.dare import Reconstruction

            tiers = [level[0].reshape(-1) for level in arrays]
            size = self.sketch.shape[0] * self.sketch.shape[1]
            return Reconstruction(tiers, self.sketch.rates[: self.rank], self.sketch.stream, size)
        return LowRank(np.concatenate([a for a, _ in arrays]), np.concatenate([b for _, b in arrays]))


class Delta(Protocol):
    def elements(self, start: int, stop: int) -> np.ndarray: ...


@dataclass(frozen=True)
class LowRank:
    """Δ̂ = A·Bᵀ from its transposed factors (float32)."""

    a_t: np.ndarray
    b_t: np.ndarray

    def elements(self, start: int, stop: int) -> np.ndarray:
        from mgit.merge.sketch.lowrank import elements

        return elements(self.a_t, self.b_t, start, stop)
