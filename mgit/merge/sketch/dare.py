"""DARE sketches of one tensor's delta: its values at a seeded random subset of positions, read back
rescaled by 1/p; the positions are never stored, a reader regenerates them from the seed.

Kept in tiers of rising keep rates, so a budget reads a lower rate by reading a prefix. Pure
functions of arrays: storing is mgit.ops.sketch's. Details: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from mgit.model.stats import bf16_bits, from_bf16_bits

VALUE_DTYPE = "BF16"  # what the kept values are stored in
VALUE_BYTES = 2
VERSION = 1  # of the algorithm (the stream, the tiers): a record names it
MAX_RATE = 0.5  # above it the exact chunks keep more for as many bytes
MAX_TIERS = 8
MIN_TIER = 256  # expected elements of the lowest tier: fewer would be mostly noise
SLAB = 1 << 22  # elements drawn at a time (bounds the memory of a large tensor's draws)
GRANULE = 1 << 16  # a reader's stretch: it counts each tier's kept elements per stretch first
RECORD_OVERHEAD = 64  # stored bytes a chunk costs beyond its payload (as lowrank's)

Array = np.ndarray


def uniforms(seed: int, start: int, stop: int) -> Array:
    """The draws u of elements ``start:stop`` (float64): one 64-bit output per element, so
    the stream advanced by ``start`` gives element ``start`` first."""
    bits = np.random.PCG64(seed)
    bits.advance(start)
    return np.random.Generator(bits).random(stop - start)


def rates_for(n: int, budget_bytes: int) -> list[float]:
    """The tiers' keep rates, lowest first, for an n-element delta whose kept values must fit
    in ``budget_bytes``: p_max from the budget (less a margin of 6 standard deviations of the
    kept count, and the chunks' overhead), then halving while a tier still expects
    :data:`MIN_TIER` elements. Empty: not even one tier fits."""
    room = budget_bytes - RECORD_OVERHEAD * MAX_TIERS * (2 + n * VALUE_BYTES // 2**20)
    if room <= 0 or n == 0:
        return []
    p = room / (VALUE_BYTES * n)
    p = min(MAX_RATE, p - 6 * (p / n) ** 0.5)  # the kept count is binomial: its spread, not its mean, must fit
    if p * n < MIN_TIER:
        return []
    rates = [p]
    while len(rates) < MAX_TIERS and rates[0] / 2 * n >= MIN_TIER:
        rates.insert(0, rates[0] / 2)
    return rates


def stored_bound(counts: list[int]) -> int:
    """At most what tiers of these element counts take stored (raw bytes + a record per MiB)."""
    return sum(VALUE_BYTES * c + RECORD_OVERHEAD * (1 + VALUE_BYTES * c // 2**20) for c in counts)


@dataclass
class Split:
    """A delta's tiers as stored (bf16 bit patterns, element order) and, at each tier end t,
    what the sketch read to there keeps: ``kept[t]`` = ⟨Δ, Δ̂⟩²/‖Δ̂‖² (the energy of Δ along
    Δ̂: Σ of the kept elements' Δ², measured with the stored values) and ``residuals[t]`` =
    ‖Δ − Δ̂_t‖ with Δ̂_t = kept values / p_t."""

    tiers: list[Array]
    energy: float  # ‖Δ‖²
    kept: list[float]
    residuals: list[float]


def split(delta: Array, seed: int, rates: list[float]) -> Split:
    """The tiers of ``delta`` (float32, any shape: taken flat) at ``rates``, slab by slab."""
    flat = delta.reshape(-1)
    n_tiers = len(rates)
    parts: list[list[Array]] = [[] for _ in rates]
    cross, power = np.zeros(n_tiers), np.zeros(n_tiers)  # Σ dv, Σ v² per tier
    energy = 0.0
    for start in range(0, flat.size, SLAB):
        d = flat[start : start + SLAB]
        tier = np.searchsorted(rates, uniforms(seed, start, start + d.size), side="right")
        energy += float(np.einsum("i,i->", d, d, dtype=np.float64))
        for t in range(n_tiers):
            x = d[tier == t]
            bits = bf16_bits(x)
            parts[t].append(bits)
            v, x = from_bf16_bits(bits).astype(np.float64), x.astype(np.float64)
            cross[t] += float(v @ x)
            power[t] += float(v @ v)
    kept, residuals = [], []
    for t, p in enumerate(rates):
        c, s = cross[: t + 1].sum(), power[: t + 1].sum()
        kept.append(c * c / s if s > 0 else 0.0)
        # Σ_kept (d − v/p)² = Σ_kept d² − 2Σdv/p + Σv²/p², and the dropped add their Σd²: ‖Δ‖² in all
        residuals.append(max(0.0, energy - 2 * c / p + s / (p * p)) ** 0.5)
    tiers = [np.concatenate(ps) if ps else np.zeros(0, "<u2") for ps in parts]
    return Split(tiers, energy, kept, residuals)


class Reconstruction:
    """Δ̂ of a DARE sketch read to a tier, any stretch of it on demand: the tiers' values are
    placed at the positions the seed regenerates and scaled by 1/p of the last tier read.
    Building it draws the whole tensor once (each tier's kept count per :data:`GRANULE`)."""

    def __init__(self, tiers: list[Array], rates: list[float], seed: int, size: int):
        self.tiers = [np.asarray(t, dtype=np.float32) for t in tiers]  # the values, unscaled
        self.rates, self.seed, self.size = rates, seed, size
        self.scale = np.float32(1.0 / rates[-1])
        granules = -(-size // GRANULE)
        counts = np.zeros((len(rates), granules + 1), dtype=np.int64)
        for g0 in range(0, granules, SLAB // GRANULE):
            g1 = min(granules, g0 + SLAB // GRANULE)
            tier = self._tiers(g0 * GRANULE, min(size, g1 * GRANULE))
            per = np.zeros((len(rates), g1 - g0), dtype=np.int64)
            at = np.arange(tier.size) // GRANULE
            for t in range(len(rates)):
                per[t] = np.bincount(at[tier == t], minlength=g1 - g0)
            counts[:, g0 + 1 : g1 + 1] = per
        self.offsets = np.cumsum(counts, axis=1)  # [t, g]: tier t's values before granule g
        for t, values in enumerate(self.tiers):
            if int(self.offsets[t, -1]) != values.size:
                raise ValueError(f"tier {t} holds {values.size} values where its seed keeps {self.offsets[t, -1]}")

    def _tiers(self, start: int, stop: int) -> Array:
        return np.searchsorted(self.rates, uniforms(self.seed, start, stop), side="right")

    def elements(self, start: int, stop: int) -> Array:
        """Elements ``start:stop`` of the flattened Δ̂ (float32)."""
        g = start // GRANULE
        tier = self._tiers(g * GRANULE, stop)
        skip = start - g * GRANULE
        out = np.zeros(stop - start, dtype=np.float32)
        for t, values in enumerate(self.tiers):
            mask = tier == t
            first = int(self.offsets[t, g]) + int(np.count_nonzero(mask[:skip]))
            mine = mask[skip:]
            out[mine] = values[first : first + int(np.count_nonzero(mine))]
        out *= self.scale
        return out


def value(energy: float, kept: float) -> float:
    """What a budget values a DARE prefix at, in units of ‖Δ‖²: ‖Δ‖²·cos(Δ, Δ̂) = ‖Δ‖·√kept
    (≈ ‖Δ‖²·√p at keep rate p). Concave in p, so a budget spreads a low keep rate over every
    tensor, as the DARE merges measured to keep accuracy did. The weight-space value, kept
    (≈ ‖Δ‖²·p, linear), ranks a DARE prefix like whole chunks, and lost 14–24 points at 10–5%
    on bench_quality where this loses ≤ 0.2 (docs/merging.md)."""
    return (energy * kept) ** 0.5
