"""Chunk encodings: byte-grouped zstd, XOR delta against a base chunk, or raw.

Byte grouping splits each element into byte planes (bf16 → 2, fp32 → 4): the plane
holding sign and exponent is highly repetitive and compresses, the mantissa planes
barely do; zstd stores incompressible 128 KiB blocks raw, so one frame suffices.
A fine-tuned chunk XOR its parent is mostly zero bits in the high planes, so the
delta compresses far better than the chunk alone (the idea of ZipNN / BitX).
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import zstandard

RAW = 0
GROUPED_ZSTD = 1
XOR_DELTA = 2  # raw XOR base chunk, then byte-grouped zstd
ZSTD_LEVEL = 1  # measured: faster than 3 and no larger on bf16 weights
ENCODINGS = (RAW, GROUPED_ZSTD, XOR_DELTA)
ENCODING_NAMES = {RAW: "raw", GROUPED_ZSTD: "zstd", XOR_DELTA: "delta"}  # as `mgit du` shows them
MIN_SAVING = 0.02  # store raw unless compression saves at least 2%
# The largest raw chunk the format allows (docs/format.md §5: chunks are cut at 4 MiB). A record
# declaring more is refused before anything is decoded: a few KiB of zstd can claim a GiB.
MAX_CHUNK_BYTES = 4 * 2**20

_local = threading.local()


def _compressor() -> zstandard.ZstdCompressor:
    c = getattr(_local, "cctx", None)
    if c is None:
        c = _local.cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL)
    return c


def _decompressor() -> zstandard.ZstdDecompressor:
    d = getattr(_local, "dctx", None)
    if d is None:
        d = _local.dctx = zstandard.ZstdDecompressor()
    return d


def group_bytes(raw: bytes | bytearray | memoryview, group: int) -> bytes | memoryview:
    """Split elements into byte planes: plane i holds byte i of every element. Done with
    shifts of whole little-endian words (~4x faster than a strided copy)."""
    if group <= 1 or not len(raw) or len(raw) % group:
        return bytes(raw)
    if group not in (2, 4, 8):
        return np.frombuffer(raw, dtype=np.uint8).reshape(-1, group).T.tobytes()
    words = np.frombuffer(raw, dtype=f"<u{group}")
    out = np.empty((group, words.size), dtype=np.uint8)
    for i in range(group):
        np.copyto(out[i], words >> (8 * i) if i else words, casting="unsafe")
    return out.data.cast("B")  # .data is memoryview(out); numpy declares ndarray a Buffer for Python >= 3.12 only


def ungroup_bytes(planes: bytes, group: int) -> bytes | memoryview:
    """Interleave the planes back into elements: each element assembled from its planes'
    bytes with shifts of little-endian words (~3x faster than strided copies)."""
    if group <= 1 or not len(planes) or len(planes) % group:
        return planes
    src = np.frombuffer(planes, dtype=np.uint8).reshape(group, -1)
    if group not in (2, 4, 8):
        out = np.empty((src.shape[1], group), dtype=np.uint8)
        for i in range(group):
            out[:, i] = src[i]
        return out.data.cast("B")
    words: npt.NDArray[np.unsignedinteger[Any]] = src[group - 1].astype(f"<u{group}")
    for i in range(group - 2, -1, -1):
        words <<= 8
        words |= src[i]
    return words.data.cast("B")


def encode(raw: bytes | bytearray | memoryview, group: int) -> tuple[int, bytes]:
    """Pick the smaller of grouped+zstd and raw; returns (encoding, payload)."""
    packed = _compressor().compress(group_bytes(raw, group))
    if len(packed) <= len(raw) * (1 - MIN_SAVING):
        return GROUPED_ZSTD, packed
    return RAW, bytes(raw)


def _xor_prefix(data: bytes | bytearray | memoryview, base: bytes | bytearray | memoryview) -> memoryview:
    """``data`` with its first min(len) bytes XORed with ``base``; the rest as is (a new,
    writable buffer)."""
    src = np.frombuffer(data, dtype=np.uint8)
    n = min(len(src), len(base))
    out = np.empty_like(src)
    np.bitwise_xor(src[:n], np.frombuffer(base, dtype=np.uint8)[:n], out=out[:n])
    out[n:] = src[n:]
    return out.data


def encode_delta(raw: bytes | bytearray | memoryview, base: bytes | bytearray | memoryview, group: int) -> bytes:
    """Payload of ``raw`` as a delta against ``base``: XOR over their common length (a
    chunk grown by appended rows keeps its old rows' bytes as zeros), then grouped zstd."""
    return _compressor().compress(group_bytes(_xor_prefix(raw, base), group))


class ChunkTooLargeError(ValueError):
    """A record whose raw bytes would be larger than any chunk the format allows."""


def check_raw_size(raw_size: int) -> None:
    """Refuse a declared raw size outside 0 … MAX_CHUNK_BYTES before any decoding."""
    if not 0 <= raw_size <= MAX_CHUNK_BYTES:
        raise ChunkTooLargeError(f"declares {raw_size} raw bytes, more than the {MAX_CHUNK_BYTES} a chunk may hold")


def inflate(payload: bytes | memoryview, raw_size: int) -> bytes:
    """The zstd frame's bytes, never more than ``raw_size`` of them in memory: a frame that
    announces more is refused from its header, one that does not is read in bounded pieces
    and refused as soon as it goes past (a decompression bomb costs nothing)."""
    check_raw_size(raw_size)
    declared = zstandard.frame_content_size(payload)
    if declared > raw_size:
        raise ChunkTooLargeError(f"its zstd frame announces {declared} bytes, more than the {raw_size} declared")
    if declared >= 0:  # the allocation is the announced size, which is within bounds
        return _decompressor().decompress(payload, max_output_size=raw_size)
    reader = _decompressor().stream_reader(payload, read_across_frames=True)
    pieces, got = [], 0
    while piece := reader.read(min(raw_size + 1 - got, 2**20) or 1):
        pieces.append(piece)
        got += len(piece)
        if got > raw_size:
            raise ChunkTooLargeError(f"its zstd data holds more than the {raw_size} bytes declared")
    return b"".join(pieces)


def decode(
    encoding: int,
    payload: bytes | memoryview,
    group: int,
    raw_size: int,
    base: bytes | bytearray | memoryview | None = None,
) -> bytearray | memoryview:
    """The raw bytes, always in a new writable buffer (callers may wrap it in a tensor).
    ``raw_size`` bounds the output: ChunkTooLargeError beyond it or beyond MAX_CHUNK_BYTES."""
    check_raw_size(raw_size)
    if encoding == RAW:
        return bytearray(payload)
    if encoding in (GROUPED_ZSTD, XOR_DELTA):
        plain = ungroup_bytes(inflate(payload, raw_size), group)
        if encoding == GROUPED_ZSTD:
            return plain if isinstance(plain, memoryview) else bytearray(plain)
        if base is None:
            raise ValueError("delta chunk without its base")
        return _xor_prefix(plain, base)
    raise ValueError(f"unknown chunk encoding {encoding}")
