"""Chunk statistics are stored in manifests, so a faster way to compute them must give the very
same float64 numbers (signed zeros included) as the way they are defined: the same file must keep
the same manifest. The float64 implementation as it was is kept here as the reference, and beside
it the float32 sums that 16-bit floats take since format 3's statistics change (docs/format.md
§8.2), with the rule that picks between them."""

from __future__ import annotations

import math
import struct
import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgit.model.dtypes import DTYPES, DType, lookup
from mgit.model.stats import STATS_BLOCK, chunk_stats, delta_l2

# -- the reference: chunk_stats / delta_l2 as they were (float64 copy of every block) ------------


def _old_to_float64(raw, dtype):
    if dtype.name == "BF16":
        bits = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        bits <<= 16
        return bits.view(np.float32).astype(np.float64)
    arr = np.frombuffer(raw, dtype=dtype.numpy)
    if arr.dtype.kind == "c":
        return arr.astype(np.complex128).view(np.float64)
    return arr.astype(np.float64)


def _old_dot(x, y):
    return float(np.einsum("i,i->", x, y))


def _old_blocks(raw, dtype):
    view = memoryview(raw).cast("B")
    step = STATS_BLOCK * (dtype.bits // 8)
    return [view[i : i + step] for i in range(0, len(view), step)]


def _finite_or_none(x):
    return x if math.isfinite(x) else None


def old_chunk_stats(raw, dtype):
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype.numpy is None:
            return None, None
        if len(raw) == 0:
            return 0.0, 0.0
        squares, peaks = 0.0, []
        for block in _old_blocks(raw, dtype):
            x = _old_to_float64(block, dtype)
            squares += _old_dot(x, x)
            peaks += [x.max(), -x.min()]
        return _finite_or_none(math.sqrt(squares)), _finite_or_none(abs(float(np.max(peaks))))


def old_delta_l2(raw, base, dtype):
    with np.errstate(invalid="ignore", over="ignore"):
        if dtype is None or dtype.numpy is None:
            return None
        squares = 0.0
        for a, b in zip(_old_blocks(raw, dtype), _old_blocks(base, dtype), strict=True):
            d = _old_to_float64(a, dtype) - _old_to_float64(b, dtype)
            squares += _old_dot(d, d)
        return _finite_or_none(math.sqrt(squares))


# -- the reference for 16-bit floats: float32 sums per block where the peak allows ------------

FLOAT32_LOW, FLOAT32_HIGH = 2.0**-40, 2.0**40
FLOAT32_BLOCK = 1 << 18


def _float32_blocks(raw, dtype):
    step = FLOAT32_BLOCK * 2
    return [memoryview(raw)[i : i + step] for i in range(0, len(raw), step)]


def _narrow(raw, dtype):
    if dtype.name == "BF16":
        wide = np.frombuffer(raw, dtype="<u2").astype(np.uint32)
        wide <<= 16
        return wide.view(np.float32)
    return np.frombuffer(raw, dtype=np.float16).astype(np.float32)


def _narrow_applies(raw, dtype) -> bool:
    if dtype.name not in ("BF16", "F16"):
        return False
    peak = old_chunk_stats(raw, dtype)[1]
    return peak is not None and FLOAT32_LOW <= peak <= FLOAT32_HIGH


def ref_chunk_stats(raw, dtype):
    if not _narrow_applies(raw, dtype):
        return old_chunk_stats(raw, dtype)
    squares = 0.0
    for block in _float32_blocks(raw, dtype):
        x = _narrow(block, dtype)
        squares += float(np.einsum("i,i->", x, x))
    return _finite_or_none(math.sqrt(squares)), old_chunk_stats(raw, dtype)[1]


def ref_delta_l2(raw, base, dtype):
    if dtype is None or not _narrow_applies(raw, dtype):
        return old_delta_l2(raw, base, dtype)
    with np.errstate(invalid="ignore", over="ignore"):
        squares = 0.0
        for a, b in zip(_float32_blocks(raw, dtype), _float32_blocks(base, dtype), strict=True):
            d = _narrow(a, dtype) - _narrow(b, dtype)
            squares += float(np.einsum("i,i->", d, d))
    if not (math.isfinite(squares) and squares > 0):  # huge or tiny differences: float64
        return old_delta_l2(raw, base, dtype)
    return math.sqrt(squares)


# -- inputs ----------------------------------------------------------------------------------

NAMES = sorted(DTYPES)
LENGTHS = [0, 1, 2, 3, 7, 255, STATS_BLOCK - 1, STATS_BLOCK, STATS_BLOCK + 1, 2 * STATS_BLOCK + 3, (1 << 18) + 5]
FLOAT_SPECIALS = [0.0, -0.0, math.nan, -math.nan, math.inf, -math.inf, 1e-45, -1e-45, 6e-8, 65504.0, 3.0e38, -3.0e38]


def _bits_of(x: float | None) -> bytes | None:
    return None if x is None else struct.pack("<d", x)


def _element_bytes(dtype: DType) -> int:
    return max(1, dtype.bits // 8)


def _values(dtype: DType, n: int, kind: str, rng: np.random.Generator) -> bytes:
    size = _element_bytes(dtype)
    if kind == "bits" or dtype.numpy is None:
        return rng.bytes(n * size)
    np_type = dtype.numpy
    count = 2 * n if dtype.name == "C64" else n
    target = np.float32 if dtype.name == "C64" else np_type
    floating = dtype.name == "C64" or np_type.kind == "f" or dtype.name.startswith(("BF", "F8"))
    if kind == "zeros":
        return bytes(n * size)
    if kind == "signed zeros" and floating:
        return np.where(rng.random(count) < 0.5, -0.0, 0.0).astype(target).tobytes()
    if floating:
        values = rng.standard_normal(count) * 10.0 ** rng.integers(-3, 3)
        if kind == "specials":
            where = rng.integers(0, max(1, count), size=min(count, 3))
            values[where] = rng.choice(FLOAT_SPECIALS, size=where.size)
        with np.errstate(over="ignore", invalid="ignore"):
            return values.astype(target).tobytes()
    info = np.iinfo(np_type)
    ints = rng.integers(info.min, info.max, size=n, endpoint=True, dtype=np_type)
    if kind in ("zeros", "signed zeros"):
        ints[:] = 0
    elif kind == "specials" and n:
        ints[rng.integers(0, n, size=min(n, 3))] = rng.choice(np.array([info.min, info.max, 0], dtype=np_type))
    return ints.tobytes()


@st.composite
def chunks(draw: st.DrawFn) -> tuple[DType, bytes, bytes]:
    dtype = DTYPES[draw(st.sampled_from(NAMES))]
    n = draw(st.sampled_from(LENGTHS) | st.integers(0, 600))
    kind = draw(st.sampled_from(["bits", "normal", "zeros", "signed zeros", "specials"]))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    raw = _values(dtype, n, kind, rng)
    how = draw(st.sampled_from(["bits", "noise", "same", "zeros"]))
    if how == "bits":
        base = rng.bytes(len(raw))
    elif how == "same":
        base = raw
    elif how == "zeros":
        base = bytes(len(raw))
    else:  # a few bytes flipped: a fine-tune-like neighbour
        flipped = bytearray(raw)
        for i in rng.integers(0, max(1, len(raw)), size=min(len(raw), 5)):
            flipped[i] ^= int(rng.integers(1, 256))
        base = bytes(flipped)
    return dtype, raw, base


def _same(new, old) -> None:
    """Equal to the bit (a -0.0 stays -0.0; None stays None)."""
    assert [_bits_of(x) for x in new] == [_bits_of(x) for x in old]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunks())
def test_chunk_stats_and_delta_l2_are_bit_identical_to_the_reference(case):
    dtype, raw, base = case
    _same(chunk_stats(raw, dtype), ref_chunk_stats(raw, dtype))
    _same([delta_l2(raw, base, dtype)], [ref_delta_l2(raw, base, dtype)])


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("kind", ["zeros", "signed zeros", "specials", "bits"])
def test_every_dtype_on_a_multi_block_chunk(name, kind):
    dtype = DTYPES[name]
    rng = np.random.default_rng(len(name) + len(kind))
    raw = _values(dtype, 3 * STATS_BLOCK + 17, kind, rng)
    base = rng.bytes(len(raw))
    _same(chunk_stats(raw, dtype), ref_chunk_stats(raw, dtype))
    _same([delta_l2(raw, base, dtype)], [ref_delta_l2(raw, base, dtype)])


@pytest.mark.parametrize("name", ["BF16", "F16", "F32", "F64"])
@pytest.mark.parametrize("value", FLOAT_SPECIALS)
def test_one_special_value_among_zeros(name, value):
    """The peak read off bit patterns: every special alone among (signed) zeros."""
    dtype = lookup(name)
    target = dtype.numpy
    with np.errstate(over="ignore", invalid="ignore"):
        values = np.where(np.arange(STATS_BLOCK + 5) % 3 == 0, -0.0, 0.0)
        values[STATS_BLOCK + 1] = value
        raw = values.astype(target).tobytes()
    _same(chunk_stats(raw, dtype), ref_chunk_stats(raw, dtype))


@pytest.mark.parametrize("name", ["BF16", "F32"])
def test_a_chunk_of_whole_elements_only(name):
    dtype = lookup(name)
    with pytest.raises(ValueError):
        ref_chunk_stats(b"\x00" * 5, dtype)
    with pytest.raises(ValueError):
        chunk_stats(b"\x00" * 5, dtype)


def test_statistics_run_concurrently_on_threads_as_alone():
    """Block buffers are per thread: two threads measuring different chunks at once get what
    each gets alone."""
    rng = np.random.default_rng(7)
    chunks_ = [rng.standard_normal(2 * STATS_BLOCK + i).astype(np.float32).tobytes() for i in range(8)]
    dtype = lookup("F32")
    expected = [ref_chunk_stats(c, dtype) for c in chunks_]
    got: dict[int, tuple[float | None, float | None]] = {}

    def run(k: int) -> None:
        for _ in range(20):
            for i in range(k, len(chunks_), 2):
                got[i] = chunk_stats(chunks_[i], dtype)

    threads = [threading.Thread(target=run, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [got[i] for i in range(len(chunks_))] == expected


def test_a_bf16_chunk_is_measured_without_float64_copies():
    """A 4 MiB bf16 chunk (32 blocks) allocates no block-sized array once the thread's buffers
    exist: the float64 copies of every block (768 KiB each) are gone."""
    rng = np.random.default_rng(3)
    bits = (rng.standard_normal(2 * 2**20).astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    raw = bits.tobytes()
    dtype = lookup("BF16")
    chunk_stats(raw, dtype)  # this thread's buffers
    tracemalloc.start()
    try:
        got = chunk_stats(raw, dtype)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert got == ref_chunk_stats(raw, dtype)
    assert peak < 64 * 1024


def _bf16(values) -> bytes:
    bits = np.asarray(values, dtype=np.float32).view(np.uint32)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


@pytest.mark.parametrize("name", ["BF16", "F16"])
def test_a_16_bit_chunk_is_summed_in_float32_and_stays_within_1e_5_of_the_exact_norm(name):
    """The float32 sums are what the manifest records (they differ from float64's last bits) and
    they are close: the norm of 2^21 bf16 weights within 1e-5 of the exactly rounded one (1.5e-6 here)."""
    rng = np.random.default_rng(11)
    values = rng.standard_normal(2**21) * 0.02
    raw = _bf16(values) if name == "BF16" else values.astype(np.float16).tobytes()
    tuned = _bf16(values * 1.01) if name == "BF16" else (values * 1.01).astype(np.float16).tobytes()
    dtype = lookup(name)
    x, y = _narrow(raw, dtype).astype(np.float64), _narrow(tuned, dtype).astype(np.float64)
    l2, _ = chunk_stats(raw, dtype)
    assert l2 == ref_chunk_stats(raw, dtype)[0] != old_chunk_stats(raw, dtype)[0]
    assert abs(l2 / math.sqrt(math.fsum(x * x)) - 1) < 1e-5
    delta = delta_l2(tuned, raw, dtype)
    assert abs(delta / math.sqrt(math.fsum((y - x) ** 2)) - 1) < 1e-5


@pytest.mark.parametrize(
    "values, base_values",
    [
        ([1e-20, -3e-21] * 500, None),  # peak under 2^-40: squares would underflow in float32
        ([3e30, -1e29] * 500, None),  # peak over 2^40: 2^21 squares could overflow
        ([1.0] * 999 + [1e-25], [1.0] * 999 + [3e-25]),  # in range, but the difference's square underflows
        ([1.0] * 999 + [3e38], [1.0] * 999 + [-3e38]),  # the difference overflows float32
    ],
)
def test_16_bit_chunks_outside_float32_s_range_are_measured_in_float64(values, base_values):
    dtype = lookup("BF16")
    raw = _bf16(values)
    base = _bf16(base_values) if base_values is not None else _bf16(np.array(values) * 0.5)
    _same(chunk_stats(raw, dtype), old_chunk_stats(raw, dtype))
    if base_values is not None:
        _same([delta_l2(raw, base, dtype)], [old_delta_l2(raw, base, dtype)])
        assert delta_l2(raw, base, dtype) != 0.0
