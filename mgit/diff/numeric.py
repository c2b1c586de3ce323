"""Change statistics of one tensor, accumulated chunk pair by chunk pair in float64.

Only chunks whose ids differ are ever read. For an identical chunk pair, Δ = 0 and
A·B = ‖A‖², which the manifest already records, so it costs no read either.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from mgit.model.dtypes import DType
from mgit.model.stats import data_math, dot, to_float64
from mgit.store.record import RawBytes


@dataclass
class Accumulator:
    """Running sums over a tensor: ‖Δ‖², A·B, ‖A‖², ‖B‖², max |Δ|."""

    delta_sq: float = 0.0
    dot: float = 0.0
    a_sq: float = 0.0
    b_sq: float = 0.0
    max_abs_delta: float = 0.0

    def add_identical(self, l2: float) -> None:
        sq = l2 * l2
        self.dot += sq
        self.a_sq += sq
        self.b_sq += sq

    @data_math
    def add_pair(self, a: RawBytes, b: RawBytes, dtype: DType, dtype_b: DType | None = None) -> None:
        """One chunk pair, the same elements of both sides; ``dtype_b``: B's dtype when it is
        not A's (a dtype change: both are widened to float64, exact for every real dtype)."""
        x = to_float64(a, dtype)
        y = to_float64(b, dtype_b or dtype)
        d = y - x
        self.delta_sq += dot(d, d)
        self.dot += dot(x, y)
        self.a_sq += dot(x, x)
        self.b_sq += dot(y, y)
        if d.size:
            self.max_abs_delta = max(self.max_abs_delta, float(np.max(np.abs(d))))

    @property
    def delta_norm(self) -> float:
        return math.sqrt(self.delta_sq)

    @property
    def relative_change(self) -> float | None:
        """‖Δ‖ / ‖A‖ (None when A is all zeros)."""
        return self.delta_norm / math.sqrt(self.a_sq) if self.a_sq > 0 else None

    @property
    def cosine(self) -> float | None:
        denom = math.sqrt(self.a_sq) * math.sqrt(self.b_sq)
        return self.dot / denom if denom > 0 else None


def numeric(dtype: DType) -> bool:
    """Whether change statistics are defined for this dtype."""
    return dtype.has_numbers
