"""Chunk statistics, summed block by block: equal to a plain float64 computation."""

from __future__ import annotations

import math

import ml_dtypes
import numpy as np
import pytest

from mgit.model.dtypes import STATS_BLOCK, chunk_stats, delta_l2, lookup


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
    l2, peak = chunk_stats(a.tobytes(), dtype)
    assert l2 == pytest.approx(math.sqrt(float(np.dot(x, x))), rel=1e-12)
    assert peak == float(np.abs(x).max())
    assert delta_l2(b.tobytes(), a.tobytes(), dtype) == pytest.approx(float(np.linalg.norm(y - x)), rel=1e-12)


def test_non_finite_values_give_no_statistic():
    raw = np.array([1.0, np.nan] + [0.5] * STATS_BLOCK, dtype=np.float32).tobytes()
    assert chunk_stats(raw, lookup("F32")) == (None, None)


def test_bf16_statistics_do_not_import_ml_dtypes():
    """Every bf16 add and merge computes statistics; importing ml_dtypes for them cost ~0.5 s of
    start-up (measured in a merge's profile), though the bit-shift paths never use it."""
    import subprocess
    import sys

    code = (
        "import sys\n"
        "from mgit.model.dtypes import chunk_stats, delta_l2, lookup\n"
        "from mgit.diff.numeric import numeric\n"
        "bf16 = lookup('BF16')\n"
        "raw, other = bytes.fromhex('803f') * 300, bytes.fromhex('0040') * 300\n"
        "assert chunk_stats(raw, bf16) == (300 ** 0.5, 1.0) and numeric(bf16)\n"
        "assert abs(delta_l2(other, raw, bf16) - 300 ** 0.5) < 1e-9\n"
        "sys.exit(3 if 'ml_dtypes' in sys.modules else 0)\n"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
