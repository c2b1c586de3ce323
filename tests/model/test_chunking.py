"""Chunk boundaries: aligned to the tensor start, whole rows when they fit."""

from __future__ import annotations

import math

from hypothesis import given
from hypothesis import strategies as st

from mgit.model.chunking import DEFAULT_CHUNK_BYTES, chunk_ranges, chunk_size_for


@given(
    rows=st.integers(1, 5000),
    cols=st.integers(1, 5000),
    bits=st.sampled_from([8, 16, 32, 64, 4, 6]),
)
def test_chunk_size_is_whole_rows_or_elements(rows, cols, bits):
    size = chunk_size_for((rows, cols), bits)
    assert size > 0
    assert (size * 8) % bits == 0  # whole elements
    row_bits = cols * bits
    if row_bits % 8 == 0 and row_bits // 8 <= DEFAULT_CHUNK_BYTES:
        assert size % (row_bits // 8) == 0
        assert size <= DEFAULT_CHUNK_BYTES


@given(rows=st.integers(1, 3000), extra=st.integers(1, 300), cols=st.integers(1, 3000))
def test_appending_rows_keeps_earlier_boundaries(rows, extra, cols):
    a = chunk_size_for((rows, cols), 16)
    b = chunk_size_for((rows + extra, cols), 16)
    assert a == b
    ra, rb = chunk_ranges(rows * cols * 2, a), chunk_ranges((rows + extra) * cols * 2, b)
    assert rb[: len(ra) - 1] == ra[:-1]


@given(n=st.integers(0, 10**8), size=st.integers(1, 10**7))
def test_ranges_cover_exactly(n, size):
    size = max(size, n // 1000 + 1)  # keep the list short
    ranges = chunk_ranges(n, size)
    assert sum(e - s for s, e in ranges) == n
    assert len(ranges) == math.ceil(n / size)
    assert all(s == i * size for i, (s, _) in enumerate(ranges))


# -- item 9: one constant for the chunk size ---------------------------------------------------


def test_chunks_are_cut_at_the_size_the_codec_allows() -> None:
    from mgit.model import chunking
    from mgit.store import codec

    assert chunking.DEFAULT_CHUNK_BYTES is codec.MAX_CHUNK_BYTES
    assert "MAX_CHUNK_BYTES" in vars(chunking)
