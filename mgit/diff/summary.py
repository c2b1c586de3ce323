"""Per-layer / per-module aggregation of a diff, for the --by-layer view and the plot.

A group's change is ‖Δ‖ over all its tensors (root of the summed squares) relative to
‖A‖ over the same tensors.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mgit.diff.model import TensorDiff
from mgit.diff.numeric import Accumulator
from mgit.model.layers import layer_of, module_of


@dataclass
class Group:
    layer: int | None
    module: str
    tensors: int = 0
    changed: int = 0
    sums: Accumulator = field(default_factory=Accumulator)  # only ‖Δ‖² and ‖A‖² are used

    @property
    def delta_norm(self) -> float:
        return self.sums.delta_norm

    @property
    def relative_change(self) -> float | None:
        return self.sums.relative_change


def by_layer(tensors: list[TensorDiff]) -> list[Group]:
    """Groups ordered by layer (non-layer groups first) then module."""
    groups: dict[tuple[int, str], Group] = {}
    for t in tensors:
        layer = layer_of(t.name)
        key = (-1 if layer is None else layer, module_of(t.name))
        g = groups.setdefault(key, Group(layer, key[1]))
        g.tensors += 1
        g.changed += t.changed
        if t.delta_norm is not None:
            g.sums.delta_sq += t.delta_norm**2
        if t.norm_a is not None:
            g.sums.a_sq += t.norm_a**2
    return [groups[k] for k in sorted(groups)]
