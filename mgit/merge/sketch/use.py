"""A stored sketch as a budgeted merge sees it: what each prefix of its rank blocks costs and
captures (an offer), and the prefix a plan chose (a use). Plain data over manifests."""

from __future__ import annotations

from dataclasses import dataclass

from mgit.merge.sketch.lowrank import block_ends
from mgit.merge.sketch.record import TensorSketch
from mgit.model.manifest import TensorManifest


@dataclass(frozen=True)
class SketchOffer:
    """One expert tensor's stored sketch: its record and its factors' rank blocks (manifests of
    Aᵀ and Bᵀ rows, in rank order), each block's stored bytes."""

    sketch: TensorSketch
    blocks_a: tuple[TensorManifest, ...]
    blocks_b: tuple[TensorManifest, ...]
    block_costs: tuple[int, ...]  # per block: both factors' stored bytes

    def options(self) -> list[tuple[int, int, float]]:
        """(rank, stored bytes, ‖Δ̂‖²) of every prefix of the blocks a merge can read."""
        out, cost = [], 0
        for end, block_cost in zip(block_ends(self.sketch.rank), self.block_costs, strict=True):
            cost += block_cost
            out.append((end, cost, self.sketch.captured(end)))
        return out

    def use(self, rank: int, chunks: tuple[int, ...]) -> SketchUse:
        """The use of the prefix ending at ``rank`` (one of :meth:`options`) in place of ``chunks``."""
        ends = block_ends(self.sketch.rank)
        n = ends.index(rank) + 1
        cost = sum(self.block_costs[:n])
        captured = self.sketch.captured(rank)
        return SketchUse(rank, self.blocks_a[:n], self.blocks_b[:n], chunks, cost, captured, self.sketch.energy)


@dataclass(frozen=True)
class SketchUse:
    """An expert tensor read as its sketch's rank-``rank`` prefix instead of its exact ``chunks``
    (those differing from the base: the sketched delta is dense, so each is computed)."""

    rank: int
    blocks_a: tuple[TensorManifest, ...]
    blocks_b: tuple[TensorManifest, ...]
    chunks: tuple[int, ...]
    cost: int  # stored bytes of the blocks read
    captured: float  # ‖Δ̂‖²
    energy: float  # ‖Δ‖² of the exact delta
