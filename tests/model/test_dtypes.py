"""Chunk statistics, summed block by block: equal to a plain float64 computation."""

from __future__ import annotations

import math
import struct
import subprocess
import sys

import ml_dtypes
import numpy as np
import pytest

from mgit.model.dtypes import lookup
from mgit.model.stats import STATS_BLOCK, SUMS_IN_FLOAT32, chunk_stats, delta_l2, stats_against


@pytest.mark.parametrize("name", ["BF16", "F16", "F32", "F64", "I8", "C64"])
def test_blocked_statistics_equal_a_whole_chunk_computation(name):
    dtype = lookup(name)
    rng = np.random.default_rng(0)
    n = 3 * STATS_BLOCK + 123
    values = rng.standard_normal(2 * n if name == "C64" else n) * 3
    np_dtype = ml_dtypes.bfloat16 if name == "BF16" else dtype.numpy
    a = values.astype(np.float32).view(np.complex64) if name == "C64" else values.astype(np_dtype)
    b = (values + 0.01).astype(np.float32).view(np.complex64) if name == "C64" else (values + 0.01).astype(np_dtype)
    x = a.view(np.float32).astype(np.float64) if name == "C64" else a.astype(np.float64)
    y = b.view(np.float32).astype(np.float64) if name == "C64" else b.astype(np.float64)
    rel = 1e-5 if name in SUMS_IN_FLOAT32 else 1e-12  # float32 sums per block, float64 otherwise
    l2, peak = chunk_stats(a.tobytes(), dtype)
    assert l2 == pytest.approx(math.sqrt(math.fsum(x * x)), rel=rel)
    assert peak == float(np.abs(x).max())
    assert delta_l2(b.tobytes(), a.tobytes(), dtype) == pytest.approx(math.sqrt(math.fsum((y - x) ** 2)), rel=rel)


def test_non_finite_values_give_no_statistic():
    raw = np.array([1.0, np.nan] + [0.5] * STATS_BLOCK, dtype=np.float32).tobytes()
    assert chunk_stats(raw, lookup("F32")) == (None, None)


@pytest.mark.parametrize("name", ["BF16", "F16", "F32", "F64", "I32", "U8", "C64"])
@pytest.mark.parametrize("zero", [0.0, -0.0, "both"])
@pytest.mark.parametrize("blocks", [1, 3])
def test_the_peak_of_a_chunk_of_zeros_is_positive_zero(name, zero, blocks):
    """max |x| of zeros is +0.0 on every machine. The float64 reduction of the block extremes
    picked either zero, depending on the CPU's SIMD and the number of blocks (-0.0 for one
    block of +0.0 on an AVX2 CPU), so the same zero tensor had other manifest bytes, and its
    file another tree id, depending on the machine that added it."""
    dtype = lookup(name)
    n = blocks * STATS_BLOCK + 5
    values = np.zeros(n) if zero != "both" else np.where(np.arange(n) % 2 == 0, 0.0, -0.0)
    if zero == -0.0:
        values = -values
    np_dtype = ml_dtypes.bfloat16 if name == "BF16" else dtype.numpy
    raw = values.astype(np_dtype).tobytes()
    l2, peak = chunk_stats(raw, dtype)
    assert (l2, peak) == (0.0, 0.0)
    assert math.copysign(1.0, peak) == 1.0
    assert math.copysign(1.0, stats_against(raw, raw, dtype)[1]) == 1.0


def test_bf16_statistics_do_not_import_ml_dtypes():
    """Every bf16 add and merge computes statistics; importing ml_dtypes for them cost ~0.5 s of
    start-up (measured in a merge's profile), though the bit-shift paths never use it."""

    code = (
        "import sys\n"
        "from mgit.model.dtypes import lookup\n"
        "from mgit.model.stats import chunk_stats, delta_l2\n"
        "from mgit.diff.numeric import numeric\n"
        "bf16 = lookup('BF16')\n"
        "raw, other = bytes.fromhex('803f') * 300, bytes.fromhex('0040') * 300\n"
        "assert chunk_stats(raw, bf16) == (300 ** 0.5, 1.0) and numeric(bf16)\n"
        "assert abs(delta_l2(other, raw, bf16) - 300 ** 0.5) < 1e-9\n"
        "sys.exit(3 if 'ml_dtypes' in sys.modules else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


@pytest.mark.parametrize("name", ["BF16", "F16", "F32", "F64", "I8", "U8", "C64", "F8_E4M3"])
@pytest.mark.parametrize("n", [0, 1, 7, STATS_BLOCK - 1, 2 * STATS_BLOCK + 5])
def test_stats_against_a_base_are_chunk_stats_and_delta_l2_to_the_bit(name, n):
    """One pass over the blocks gives exactly the two functions' numbers (also with NaN, inf, -0.0)."""
    dtype = lookup(name)
    rng = np.random.default_rng(n)
    width = dtype.bits // 8
    a = bytearray(rng.integers(0, 256, n * width, dtype=np.uint8).tobytes())
    b = bytearray(rng.integers(0, 256, n * width, dtype=np.uint8).tobytes())
    if name == "BF16" and n > 10:
        a[0:2], a[2:4], b[4:6] = bytes.fromhex("c07f"), bytes.fromhex("8000"), bytes.fromhex("807f")  # NaN, -0, inf
    got = stats_against(bytes(a), bytes(b), dtype)
    want = (*chunk_stats(bytes(a), dtype), delta_l2(bytes(a), bytes(b), dtype))
    assert [None if x is None else struct.pack("<d", x) for x in got] == [
        None if x is None else struct.pack("<d", x) for x in want
    ]


def test_stats_against_refuses_chunks_of_different_sizes():
    with pytest.raises(ValueError, match="delta_l2 of chunks"):
        stats_against(b"\0" * 4, b"\0" * 6, lookup("BF16"))


def test_mergeable_dtypes_are_torchs_floating_point_ones():
    import torch

    from mgit.model.dtypes import DTYPES
    from mgit.model.torch_io import _NAMES

    for name, dtype in DTYPES.items():
        torch_float = name in _NAMES and hasattr(torch, _NAMES[name]) and getattr(torch, _NAMES[name]).is_floating_point
        assert dtype.mergeable == torch_float, name


# -- item 11: a new np.errstate per call (one shared instance is thread-safe only on numpy >= 2) --


def test_data_math_enters_a_fresh_errstate_per_call(monkeypatch) -> None:
    import numpy as np

    from mgit.model import dtypes, stats

    made = []
    real = np.errstate

    def counting(**kwargs):
        made.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(stats.np, "errstate", counting)
    raw = np.array([np.inf, -np.inf, 1.0], dtype=np.float32).tobytes()
    fp32 = dtypes.lookup("F32")
    with real(all="raise"):
        for _ in range(2):
            assert stats.to_float64(raw, fp32)[2] == 1.0
    assert len(made) == 2 and made[0] == {"invalid": "ignore", "over": "ignore"}
