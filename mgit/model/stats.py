"""The numbers in a chunk: float views of its raw bytes (bf16 by bit shifts, without
ml_dtypes) and its content statistics.

Statistics (L2 norm, max |x|) are accumulated in float64 with numpy's einsum loop,
which is single-threaded with a fixed order (BLAS dot is not: its result depends on the
thread count), so the same bytes give the same numbers run after run and identical
tensors keep identical manifest blobs. The numbers are informative (planning, diff);
no reader relies on two machines producing the same last bit.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import TYPE_CHECKING, ParamSpec, TypeVar

import numpy as np

from mgit import memory
from mgit.model.dtypes import DType

if TYPE_CHECKING:
    from mgit.store.record import RawBytes

P = ParamSpec("P")
R = TypeVar("R")


def data_math(fn: Callable[P, R]) -> Callable[P, R]:
    """NaN/Inf (signalling NaN payloads included) are data in a checkpoint, not errors: numpy's
    "invalid value"/"overflow" warnings about them are silenced wherever the numbers are data.
    A new np.errstate per call: one shared instance is safe across threads only on numpy >= 2."""

    @functools.wraps(fn)
    def quiet(*args: P.args, **kwargs: P.kwargs) -> R:
        with np.errstate(invalid="ignore", over="ignore"):
            return fn(*args, **kwargs)

    return quiet


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


@data_math
def to_float64(raw: RawBytes, dtype: DType) -> np.ndarray:
    """The chunk's numbers as float64 (exact for every dtype; complex numbers become
    (real, imaginary) pairs). bf16 is widened by a bit shift: plain numpy loops that
    release the GIL and run ~5x faster than a cast through ml_dtypes."""
    if dtype.name == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        bits <<= 16
        return bits.view(np.float32).astype(np.float64)
    arr = np.frombuffer(raw, dtype=dtype.numpy)
    if arr.dtype.kind == "c":
        return arr.astype(np.complex128).view(np.float64)
    return arr.astype(np.float64)


def to_float32(raw: RawBytes, dtype: DType) -> np.ndarray:
    """A real floating chunk's numbers as float32 (F64 rounded): bf16 widened by a bit shift,
    as :func:`to_float64`, so nothing imports ml_dtypes."""
    if dtype.name == "BF16":
        return from_bf16_bits(np.frombuffer(raw, dtype="<u2"))
    return np.frombuffer(raw, dtype=dtype.numpy).astype(np.float32)


def from_bf16_bits(bits: np.ndarray) -> np.ndarray:
    """bf16 bit patterns (uint16) as float32: exact, by a shift."""
    wide = bits.astype(np.uint32)
    wide <<= 16
    return wide.view(np.float32)


def bf16_bits(values: np.ndarray) -> np.ndarray:
    """Finite float32 ``values`` rounded to bf16 (to nearest, ties to even), as bf16's bit
    patterns (uint16): what a cast through ml_dtypes gives, without importing it."""
    bits = np.ascontiguousarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")


def dot(x: np.ndarray, y: np.ndarray) -> float:
    # einsum's sum-of-products loop is single-threaded with a fixed order (unlike BLAS dot),
    # so the same bytes always give the same last bit.
    return float(np.einsum("i,i->", x, y))


STATS_BLOCK = 1 << 16  # elements widened to float64 at a time: stays in cache, ~3x faster than whole chunks
FLOAT32_BLOCK = 1 << 18  # elements of a 16-bit float chunk summed in float32 at a time (1 MiB: 25% faster)

# Float dtypes whose max |x| is read off the bit patterns: (element width in bits, pattern of
# +inf: a magnitude at or above it is an infinity or a NaN).
_FLOAT_BITS = {"BF16": (16, 0x7F80), "F16": (16, 0x7C00), "F32": (32, 0x7F80_0000), "F64": (64, 0x7FF0 << 48)}
_FLOAT_OF_BITS = {"BF16": "<f4", "F16": "<f2", "F32": "<f4", "F64": "<f8"}


# Per-thread block buffers (:func:`mgit.memory.scratch`; statistics run on every pool thread at
# once): each block is widened into the same cache-resident buffers instead of three fresh arrays.
def _wide(name: str) -> np.ndarray:
    return memory.scratch_array(f"stats {name}", np.float64, 2 * STATS_BLOCK)  # 2x: a complex block is 2 floats


def _bits(name: str) -> np.ndarray:
    return memory.scratch_array(f"stats {name}", np.uint32, FLOAT32_BLOCK)  # also a float32 block (16-bit floats)


def _blocks(raw: RawBytes, dtype: DType, elements: int = STATS_BLOCK) -> list[memoryview]:
    """``raw`` cut into slices of ``elements`` elements (whole elements each)."""
    view = memoryview(raw).cast("B")
    step = elements * (dtype.bits // 8)
    return [view[i : i + step] for i in range(0, len(view), step)]


def _widen(block: memoryview, dtype: DType, out: np.ndarray) -> np.ndarray:
    """The block's numbers as float64, written into ``out`` (a view of its first elements):
    the same values :func:`to_float64` returns, so the sums over them are the same to the bit."""
    if dtype.name == "BF16":
        bits = np.frombuffer(block, dtype="<u2")
        wide = _bits("bits")[: bits.size]
        np.copyto(wide, bits)
        wide <<= 16  # bf16 is the top half of a float32
        x = out[: bits.size]
        np.copyto(x, wide.view(np.float32))
        return x
    numbers = np.frombuffer(block, dtype=dtype.numpy)
    if numbers.dtype.kind == "c":  # (real, imaginary) pairs, as to_float64 gives them
        numbers = numbers.view(np.float32 if numbers.dtype.itemsize == 8 else np.float64)
    x = out[: numbers.size]
    np.copyto(x, numbers, casting="unsafe")  # the cast astype(np.float64) makes
    return x


def _float_peak(raw: RawBytes, name: str) -> tuple[bool, float | None]:
    """(known, max |x|) of a float chunk from its bit patterns, without widening anything:
    below the infinity pattern, a larger magnitude pattern is a larger magnitude. The largest
    pattern with the sign bit clear is the signed maximum, the largest with it set the
    unsigned one. Not known for a chunk of zeros only: the float64 reduction measures it
    (its peak is +0.0)."""
    bits, inf = _FLOAT_BITS[name]
    signed = np.frombuffer(raw, dtype=f"<i{bits // 8}")
    sign = 1 << (bits - 1)
    top_clear = int(signed.max())
    top_set = int(signed.view(f"<u{bits // 8}").max())
    magnitude = max(top_clear, top_set - sign if top_set >= sign else 0)
    if magnitude >= inf:
        return True, None  # an infinity or a NaN: no finite peak
    if magnitude == 0:
        return False, None
    if name == "BF16":
        return True, float(np.array(magnitude << 16, dtype="<u4").view("<f4")[()])
    return True, float(np.array(magnitude, dtype=f"<u{bits // 8}").view(_FLOAT_OF_BITS[name])[()])


def chunk_stats(raw: RawBytes, dtype: DType) -> tuple[float | None, float | None]:
    """(L2 norm, max |x|) of one chunk in float64; None where undefined or non-finite."""
    l2, peak, _ = stats_against(raw, None, dtype)
    return l2, peak


@data_math
def delta_l2(raw: RawBytes, base: RawBytes, dtype: DType | None) -> float | None:
    """‖raw − base‖₂ as numbers of ``dtype`` (None where undefined): what
    :func:`stats_against` records, to the bit."""
    if dtype is None or not dtype.has_numbers:
        return None
    return stats_against(raw, base, dtype)[2]


# 16-bit floats are measured in float32: their squares (8 or 11 significant bits, squared) are
# exact there, as are the differences of two of them but for exponents 16 or more apart, and
# float32 sums take a fine-tune's add ~20% less time than the float64 widening did. The sums
# are within a few 1e-6 of the exact norm, which changes no merge plan and no diff. Only a
# chunk whose peak lies in [2^-40, 2^40] is: no square then underflows into significance or
# overflows (2^21 elements of at most 2^80); any other, and a delta whose float32 sum is not
# finite or not positive, is measured in float64.
SUMS_IN_FLOAT32 = ("BF16", "F16")
FLOAT32_PEAKS = (2.0**-40, 2.0**40)


def _narrow(block: memoryview, dtype: DType, out: np.ndarray) -> np.ndarray:
    """A 16-bit float block's numbers as float32, written into ``out`` (uint32, at least the
    block's length): exact."""
    if dtype.name == "BF16":
        bits = np.frombuffer(block, dtype="<u2")
        x = out[: bits.size]
        np.copyto(x, bits)
        x <<= 16  # bf16 is the top half of a float32
        return x.view(np.float32)
    numbers = np.frombuffer(block, dtype=dtype.numpy)
    x32 = out[: numbers.size].view(np.float32)
    np.copyto(x32, numbers)
    return x32


def _sums_in_float32(raw: RawBytes, base: RawBytes | None, dtype: DType) -> tuple[float, float]:
    """(Σ x², Σ (x − base)²) of a 16-bit float chunk: float32 sums of each block of
    FLOAT32_BLOCK elements (numpy's einsum, a fixed-order loop), added up in float64 block by
    block."""
    squares, delta_squares = 0.0, 0.0
    bases = _blocks(base, dtype, FLOAT32_BLOCK) if base is not None else None
    for n, a in enumerate(_blocks(raw, dtype, FLOAT32_BLOCK)):
        x = _narrow(a, dtype, _bits("bits"))
        squares += float(np.einsum("i,i->", x, x))
        if bases is not None:
            y = _narrow(bases[n], dtype, _bits("other bits"))
            np.subtract(x, y, out=y)
            delta_squares += float(np.einsum("i,i->", y, y))
    return squares, delta_squares


def _sums_in_float64(
    raw: RawBytes, base: RawBytes | None, dtype: DType, peak_known: bool
) -> tuple[float, float, list[float]]:
    """(Σ x², Σ (x − base)², block extremes for the peak unless known) widened to float64."""
    squares, delta_squares, peaks = 0.0, 0.0, []
    bases = _blocks(base, dtype) if base is not None else None
    for n, a in enumerate(_blocks(raw, dtype)):
        x = _widen(a, dtype, _wide("wide"))
        squares += dot(x, x)
        if not peak_known:
            peaks += [x.max(), -x.min()]
        if bases is not None:
            np.subtract(x, _widen(bases[n], dtype, _wide("other")), out=x)
            delta_squares += dot(x, x)
    return squares, delta_squares, peaks


@data_math
def stats_against(
    raw: RawBytes, base: RawBytes | None, dtype: DType
) -> tuple[float | None, float | None, float | None]:
    """(L2 norm, max |x|) of one chunk and, with ``base``, ‖raw − base‖₂; None where undefined
    or non-finite. One pass over fixed blocks in a fixed order (deterministic): each block of
    ``raw`` is converted once for both sums (ingesting a fine-tune or a merge's output needs both
    for every chunk). The peak of a float chunk comes from its bit patterns (exact: the float64
    maximum is the same number). 16-bit floats are summed in float32 (SUMS_IN_FLOAT32), the
    rest in float64. ``raw`` alone decides how its norm is computed, so chunk_stats(raw) is
    always this function's first two values."""
    if not dtype.has_numbers:
        return None, None, None
    if base is not None and len(raw) != len(base):
        raise ValueError(f"delta_l2 of chunks of {len(raw)} and {len(base)} bytes")
    if len(raw) == 0:
        return 0.0, 0.0, None if base is None else 0.0
    known, peak = _float_peak(raw, dtype.name) if dtype.name in _FLOAT_BITS else (False, None)
    narrow = dtype.name in SUMS_IN_FLOAT32 and peak is not None and FLOAT32_PEAKS[0] <= peak <= FLOAT32_PEAKS[1]
    if narrow:
        squares, delta_squares = _sums_in_float32(raw, base, dtype)
        if base is not None and not (math.isfinite(delta_squares) and delta_squares > 0):
            delta_squares = _sums_in_float64(raw, base, dtype, True)[1]  # huge or tiny differences
    else:
        squares, delta_squares, peaks = _sums_in_float64(raw, base, dtype, known)
        if not known:
            # np.max keeps a NaN; abs() makes a chunk of zeros +0.0, whichever zero the
            # reduction picks (that choice depends on the CPU's SIMD and the block count)
            peak = _finite_or_none(abs(float(np.max(peaks))))
    delta = None if base is None else _finite_or_none(math.sqrt(delta_squares))
    return _finite_or_none(math.sqrt(squares)), peak, delta
