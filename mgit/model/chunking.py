"""Where a tensor's bytes are cut into chunks.

Chunks are aligned to the tensor's own start and hold a whole number of rows when a
row fits (else a whole number of elements), so appending rows (vocabulary extension)
leaves every earlier chunk, and its id, unchanged.
"""

from __future__ import annotations

import math

from mgit.store.codec import MAX_CHUNK_BYTES

DEFAULT_CHUNK_BYTES = MAX_CHUNK_BYTES  # chunks are cut at the largest size the format allows


def chunk_size_for(shape: tuple[int, ...], bits: int, target: int = DEFAULT_CHUNK_BYTES) -> int:
    """Chunk size in bytes for a tensor of this shape and element width."""
    unit = math.lcm(bits, 8) // 8  # smallest whole-byte, whole-element unit
    row_bits = math.prod(shape[1:]) * bits if len(shape) >= 2 else 0
    if row_bits and row_bits % 8 == 0 and row_bits // 8 <= target:
        row_bytes = row_bits // 8
        return (target // row_bytes) * row_bytes
    return max(unit, (target // unit) * unit)


def chunk_ranges(nbytes: int, chunk_size: int) -> list[tuple[int, int]]:
    """Half-open byte ranges covering ``nbytes`` in chunks of ``chunk_size``."""
    return [(start, min(start + chunk_size, nbytes)) for start in range(0, nbytes, chunk_size)]
