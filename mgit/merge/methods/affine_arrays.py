"""Task arithmetic on bf16 and fp16 slices in numpy, to the bit what the torch kernel gives.

Why: a merge that needs nothing else then never imports torch (~1.3 s warm, ~4 s cold, most of a
budgeted merge's fixed cost). Slices whose torch result depends on its summation order (more than
16 experts, or more than 4 and a ragged length) or that could overflow are left to torch. What
torch does, op by op: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from mgit import memory
from mgit.merge.methods.affine_probe import affine_reproduces_torch

MAX_SUMMED = 16  # rows torch's CPU sum adds one after another (see the module docstring)
BLOCK = 128  # slice lengths (elements) torch sums column block by column block, on any x86 SIMD width
INTERLEAVED = 4  # partial sums of torch's sum over a slice's last columns: in order up to this many rows
# Elements per pass. Each numpy call takes the GIL back when it returns, and on the merge's pool
# that wait, not the arithmetic, dominated when every expert cost a dozen calls per chunk: the
# experts of a part are stacked and go through each step in one call.
SLICE = 1 << 17

_FORMATS = {  # dtype → (exponent mask of its 16 bits, exponent bias, mantissa bits, largest finite)
    "BF16": (0x7F80, 127, 7, 3.3895313892515355e38),
    "F16": (0x7C00, 15, 10, 65504.0),
}


def _scratch(rows: int, n: int) -> np.ndarray:
    """This thread's float32 scratch of ``rows`` x ``n`` (:func:`mgit.memory.scratch`): reused,
    since the fresh pages of a new array of several MB cost a page fault each."""
    return memory.scratch_array("affine rows", np.float32, rows * n).reshape(rows, n)


def _add_rounding_bias(values: np.ndarray, spare: np.ndarray) -> None:
    """Add to each float32's bits what rounds it to bf16 (to nearest, ties to even): the upper
    halves are then the rounded bf16 bits, the lower ones garbage to clear or drop."""
    u, s = values.view(np.uint32), spare.view(np.uint32)
    np.right_shift(u, 16, out=s)
    np.bitwise_and(s, 1, out=s)
    np.add(s, 0x7FFF, out=s)
    np.add(u, s, out=u)


def _round(values: np.ndarray, spare: np.ndarray, dtype: str, look_first: bool = False) -> None:
    """float32 ``values`` rounded to ``dtype`` (to nearest, ties to even) in place, as an op's
    result is; ``spare`` is scratch of their shape. ``look_first``: where the values are nearly
    always dtype values already (a bf16 delta times a power of two), first look whether rounding
    would change any of them (one pass, against five to round)."""
    if dtype == "F16":
        np.copyto(values, values.astype(np.float16))
        return
    if look_first and not int(np.bitwise_or.reduce(values.view(np.uint32), axis=None)) & 0xFFFF:
        return
    _add_rounding_bias(values, spare)
    np.bitwise_and(values.view(np.uint32), 0xFFFF0000, out=values.view(np.uint32))


def _power_of_two(value: np.float32) -> bool:
    """Whether ``value`` is ±2^k: a product by it is exact in float32 unless it leaves the range."""
    mantissa, _ = math.frexp(float(value))
    return abs(mantissa) == 0.5


def _scalar(value: float, dtype: str) -> np.float32:
    """A Python float as torch makes it a dtype element: through float32."""
    held = np.array([value], np.float32)
    _round(held, np.empty_like(held), dtype)
    return np.float32(held[0])


@dataclass(frozen=True)
class AffineKernel:
    """base + lambda * Σ_k weight_k * (expert_k - base) [/ Σ weights], for one dtype and one
    tensor's resolved parameters (see :func:`affine_kernel`)."""

    dtype: str
    weights: tuple[np.float32, ...]  # each rounded to the dtype
    divisor: np.float32 | None  # normalize: Σ of all weights in the dtype (|.| < 1e-8 in the dtype → 1)
    scale: np.float32 | None  # lambda as float32, when != 1
    limit: int  # inputs' exponent fields must be below this (bits as stored)

    @cached_property
    def exact_products(self) -> bool:
        """Every weight ±2^k: a delta times it is nearly always a dtype value already, so the
        rounding after the product is looked for before it is done (``_round``'s ``look_first``)."""
        return all(_power_of_two(w) for w in self.weights)

    def merge(
        self, base: np.ndarray, experts: Sequence[np.ndarray], present: Sequence[int] | None, out: np.ndarray
    ) -> bool:
        """Write the merged slice's bits into ``out`` (bits of the dtype, as uint16, like the
        inputs; ``present``: which experts ``experts`` are, the others equal to the base here).
        False, with ``out`` unspecified, when the slice is not this kernel's: too many experts, a
        length torch sums in another order, or an input beyond :attr:`limit` (then torch merges it)."""
        which = list(range(len(experts))) if present is None else list(present)
        if len(which) > MAX_SUMMED or (len(which) > INTERLEAVED and base.size % BLOCK):
            return False
        if not which:  # no expert differs here: the base itself (as torch's kernel returns it, -0 kept)
            out[:] = base
            return True
        mask = np.uint16(_FORMATS[self.dtype][0])
        for lo in range(0, base.size, SLICE):
            part = slice(lo, lo + SLICE)
            exponents = _scratch(1, min(SLICE, base.size - lo))[0].view(np.uint16)
            for bits in (base[part], *(e[part] for e in experts)):
                if int(np.bitwise_and(bits, mask, out=exponents[: bits.size]).max()) >= self.limit:
                    return False
        weights: np.ndarray | None = None  # a plain sum (all ones): the products are the deltas themselves
        if any(self.weights[k] != 1 for k in which):
            weights = np.array([self.weights[k] for k in which], np.float32).reshape(-1, 1)
        for lo in range(0, base.size, SLICE):
            part = slice(lo, lo + SLICE)
            scratch = _scratch(2 * len(which) + 2, min(SLICE, base.size - lo))
            self._merge_part(base[part], [e[part] for e in experts], weights, scratch, out[part])
        return True

    def _merge_part(
        self,
        base: np.ndarray,
        experts: list[np.ndarray],
        weights: np.ndarray | None,
        scratch: np.ndarray,
        out: np.ndarray,
    ) -> None:
        """One part into ``out``, in float32 ``scratch`` (2m + 2 rows of the part's size for m
        experts): the experts' deltas as one [m, n] stack, each step one numpy call."""
        m = len(experts)
        deltas, spare, b, total = scratch[:m], scratch[m : 2 * m], scratch[2 * m], scratch[2 * m + 1]
        for row, expert in zip(deltas, experts, strict=True):
            self._widen(expert, row)
        self._widen(base, b)
        np.subtract(deltas, b, out=deltas)
        _round(deltas, spare, self.dtype)
        if weights is not None:
            np.multiply(deltas, weights, out=deltas)
            _round(deltas, spare, self.dtype, look_first=self.exact_products)
        if m == 1:  # (most chunks a budget computes): the sum of one row is the row, from +0
            np.add(deltas[0], 0, out=total)  # already a dtype value: rounding would not change it
        else:
            np.add.reduce(deltas, axis=0, out=total)  # row after row, as torch sums up to 16 rows
            np.add(total, 0, out=total)  # torch's sum starts from +0: an all -0 column sums to +0
            _round(total, spare[0], self.dtype)
        if self.divisor is not None:
            np.divide(total, self.divisor, out=total)
            _round(total, spare[0], self.dtype, look_first=_power_of_two(self.divisor))
        if self.scale is not None:
            np.multiply(total, self.scale, out=total)
            _round(total, spare[0], self.dtype, look_first=_power_of_two(self.scale))
        np.add(b, total, out=b)
        if self.dtype == "F16":
            np.copyto(out.view(np.float16), b, casting="same_kind")
            return
        _add_rounding_bias(b, spare[0])  # rounded as _round rounds, the upper halves straight to the output
        np.right_shift(b.view(np.uint32), 16, out=out, casting="unsafe")

    def _widen(self, bits: np.ndarray, out: np.ndarray) -> None:
        if self.dtype == "F16":
            np.copyto(out, bits.view(np.float16))
        else:
            np.left_shift(bits, 16, out=out.view(np.uint32), dtype=np.uint32)


def affine_kernel(dtype: str, weights: Sequence[float], normalize: bool, lam: float) -> AffineKernel | None:
    """The kernel for slices of ``dtype`` (bf16 or fp16) with these parameters, or None when it
    has none: another dtype, more experts than a sum torch adds in order, weights so large that
    no input range is safe, or an installed torch that computes otherwise than this module
    replays (:mod:`~mgit.merge.methods.affine_probe`, once per process): torch merges then."""
    if dtype not in _FORMATS or len(weights) > MAX_SUMMED or not affine_reproduces_torch():
        return None
    return replayed_kernel(dtype, weights, normalize, lam)


def replayed_kernel(dtype: str, weights: Sequence[float], normalize: bool, lam: float) -> AffineKernel | None:
    """:func:`affine_kernel` without asking whether torch still computes as replayed (the probe's)."""
    if dtype not in _FORMATS or len(weights) > MAX_SUMMED:
        return None
    mask, bias, mantissa, largest = _FORMATS[dtype]
    rounded = tuple(_scalar(w, dtype) for w in weights)
    divisor = None
    if normalize:
        total = np.float32(0)
        for w in rounded:  # torch sums the weights in float32, in order, then rounds
            total = np.float32(total + w)
        divisor = _scalar(float(total), dtype)
        if abs(float(divisor)) < float(_scalar(1e-8, dtype)):  # compared in the dtype: 1e-8 is 0 in fp16
            divisor = np.float32(1)
        if divisor == 0:  # torch divides by zero there: its NaN and inf are left to it
            return None
    scale = None if lam == 1 else np.float32(lam)
    # With every |input| < 2**e: |delta| < 2**(e+1), |Σ w·delta| < 2**(e+1)·Σ|w|, then / divisor,
    # * lambda, + base. Keep all of it below half the largest finite value (rounding adds ≤ 1 ulp).
    growth = 2 * sum(abs(float(w)) for w in rounded)
    if divisor is not None:
        growth /= abs(float(divisor))
    growth = growth * (abs(float(scale)) if scale is not None else 1.0) + 1
    e = math.floor(math.log2(largest / 2 / growth)) if math.isfinite(growth) and growth > 0 else -1
    if e < 1:
        return None
    limit = min(e + bias, (mask >> mantissa)) << mantissa  # exponent field of 2**e, at most inf's
    return AffineKernel(dtype, rounded, divisor, scale, limit)
