"""Where a tensor's bytes, and a large non-tensor file's, are cut into chunks.

A tensor's chunks are aligned to its own start, whole rows where a row fits, so appended rows
leave every earlier chunk (and its id) unchanged. A large non-tensor file is cut where its
content says (FastCDC), so an insertion changes only the chunks holding it. Why: docs/design.md,
"Notes from the code".
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from typing import Literal

from mgit.store.limits import MAX_CHUNK_BYTES

DEFAULT_CHUNK_BYTES = MAX_CHUNK_BYTES  # chunks are cut at the largest size the format allows
# Content-defined chunks of large non-tensor files (docs/format.md §5): no chunk is larger than the
# format allows; ~1.25 MiB on average (FastCDC skips the first CDC_MIN bytes of a chunk), so one edit
# costs a small chunk, and a 10 GB file ~8000 of them (a 0.6 MB manifest).
CDC_MIN, CDC_AVG, CDC_MAX = 2**18, 2**20, MAX_CHUNK_BYTES
CDC_NORMALIZATION: Literal[1] = 1  # FastCDC's normalized chunking level (NC), as fastcdc-rs's v2020 default
CDC_METHOD = "fastcdc2020"
CDC_READ = 8 * 2**20  # bytes the cutter reads at a time


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


class ShrankError(OSError):
    """A file ended before the size it had when mgit began reading it: it changed meanwhile."""


def cdc_chunks(fd: int, size: int) -> Iterator[tuple[int, bytes]]:
    """(offset, bytes) of each content-defined chunk of the first ``size`` bytes of the open
    file ``fd``, in order, reading the file once, front to back (ShrankError if it is shorter)."""
    from pyfastcdc import FastCDC  # here: every command imports this module, few cut a large file

    cutter = FastCDC(CDC_AVG, min_size=CDC_MIN, max_size=CDC_MAX, normalized_chunking=CDC_NORMALIZATION)
    for chunk in cutter.cut_stream(_Stream(fd, size)):
        yield chunk.offset, bytes(chunk.data)  # a view of the cutter's buffer, reused for the next chunk


class _Stream:
    """The file seen by the cutter as a stream of ``size`` bytes, read with ``preadv``."""

    def __init__(self, fd: int, size: int):
        self.fd, self.size, self.at = fd, size, 0

    def readinto(self, buf: memoryview) -> int:
        n = min(len(buf), CDC_READ, self.size - self.at)
        if n <= 0:
            return 0
        got = os.preadv(self.fd, [buf[:n]], self.at)
        if got <= 0:
            raise ShrankError(f"file shrank while being read (wanted {self.size} bytes, it ends at {self.at})")
        self.at += got
        return got
