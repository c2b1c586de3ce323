"""One tensor's sketch made from its delta to its parent: a low-rank sketch's rank blocks or a DARE
sketch's tiers, as the blocks it stores (bf16 bit patterns) with its record, and the parameters a
sketch record names its algorithm by. Pure functions of arrays: reading the delta and storing the
blocks is mgit.ops.sketch's."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from blake3 import blake3

from mgit.merge.sketch import dare, lowrank
from mgit.merge.sketch.record import TensorSketch
from mgit.model.stats import bf16_bits, from_bf16_bits


@dataclass
class Made:
    """One tensor's sketch before it is stored: its record (stored bytes still 0) and, per
    level, the blocks it adds as stored (bf16 bit patterns), by factor name."""

    sketch: TensorSketch
    levels: list[list[tuple[str, np.ndarray]]]


def size_for(kind: str, shape: tuple[int, int], budget: int) -> int | list[float]:
    """What a sketch of ``kind`` of an m×n tensor may hold within ``budget`` stored bytes: a rank
    (``lowrank``) or the DARE tiers' keep rates (``dare``); 0 or [] where none fits."""
    if kind == "dare":
        return dare.rates_for(shape[0] * shape[1], budget)
    return lowrank.rank_for(shape, budget)


def make(
    kind: str, file: str, name: str, delta: np.ndarray, size: int | list[float], budget: int, seed: int, commit: str
) -> Made | None:
    """The sketch of ``kind`` of tensor ``name`` (of ``file``, in ``commit``) from its delta (m×n,
    float32), of ``size`` (see :func:`size_for`) within ``budget`` stored bytes, drawn from the
    sketch's ``seed``; None where there is nothing to sketch (a delta 0 to within rounding, or no
    DARE tier that fits)."""
    if kind == "dare":
        assert isinstance(size, list)
        return dared(file, name, delta, size, budget, stream_seed(seed, commit, name))
    assert isinstance(size, int)
    return factored(file, name, delta, size, tensor_seed(seed, name))


def factored(file: str, name: str, delta: np.ndarray, rank: int, seed: int) -> Made | None:
    """A low-rank sketch of ``delta`` of at most ``rank``: its factors' rank blocks, with the
    residuals measured with the factors as stored."""
    a_t, b_t, sigma = lowrank.factorize(delta, rank, seed)
    if not sigma:
        return None
    a_bits, b_bits = bf16_bits(a_t), bf16_bits(b_t)  # as stored, and measured so
    ends = lowrank.block_ends(len(sigma))  # the Gram route may drop directions of σ 0
    residuals = lowrank.residuals(delta, from_bf16_bits(a_bits), from_bf16_bits(b_bits), ends)
    energy = float(np.einsum("ij,ij->", delta, delta, dtype=np.float64))
    levels, start = [], 0
    for end in ends:
        levels.append([("a", a_bits[start:end]), ("b", b_bits[start:end])])
        start = end
    shape = (delta.shape[0], delta.shape[1])
    return Made(TensorSketch(file, name, shape, len(sigma), sigma, energy, residuals, 0), levels)


def dared(file: str, name: str, delta: np.ndarray, rates: list[float], budget: int, stream: int) -> Made | None:
    """A DARE sketch of ``delta``: the tiers of ``rates`` drawn from ``stream`` that fit ``budget``."""
    cut = dare.split(delta, stream, rates)
    if cut.energy == 0:
        return None
    n = len(cut.tiers)  # the kept counts are binomial: a top tier that would not fit is dropped
    while n > 0 and dare.stored_bound([v.size for v in cut.tiers[:n]]) > budget:
        n -= 1
    if n == 0:
        return None
    shape = (delta.shape[0], delta.shape[1])
    made = TensorSketch(file, name, shape, n, [], cut.energy, cut.residuals[:n], 0, rates[:n], cut.kept[:n], stream)
    return Made(made, [[("v", v)] for v in cut.tiers[:n]])


def tensor_seed(seed: int, name: str) -> int:
    """Each tensor's own seed, from the sketch's seed and the tensor's name (stable across runs)."""
    return int.from_bytes(blake3(f"{seed}:{name}".encode()).digest()[:8], "little") >> 1


def stream_seed(seed: int, commit: str, name: str) -> int:
    """A DARE tensor's stream: the commit takes part, so two experts keep independent positions
    (one mask for all would drop the same elements of every expert)."""
    return tensor_seed(seed, f"{commit}:{name}")


def params(kind: str) -> dict[str, Any]:
    """The algorithm a sketch record of ``kind`` names, with its parameters."""
    if kind == "dare":
        return {
            "algorithm": "dare",
            "version": dare.VERSION,
            "max_rate": dare.MAX_RATE,
            "max_tiers": dare.MAX_TIERS,
            "value_dtype": dare.VALUE_DTYPE,
        }
    return {
        "algorithm": "svd",
        "version": lowrank.VERSION,
        "exact_from": lowrank.EXACT_FROM,
        "oversample": lowrank.OVERSAMPLE,
        "power_iterations": lowrank.NITER,
        "factor_dtype": lowrank.FACTOR_DTYPE,
    }
