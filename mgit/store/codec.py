"""Chunk encodings: byte-grouped zstd, XOR delta against a base chunk, or raw.

Byte grouping splits each element into byte planes (bf16 → 2, fp32 → 4): the plane
holding sign and exponent is highly repetitive and compresses, the mantissa planes
barely do; zstd stores incompressible 128 KiB blocks raw, so one frame suffices.
A fine-tuned chunk XOR its parent is mostly zero bits in the high planes, so the
delta compresses far better than the chunk alone (the idea of ZipNN / BitX).
"""

from __future__ import annotations

import threading

import numpy as np
import numpy.typing as npt
import zstandard

RAW = 0
GROUPED_ZSTD = 1
XOR_DELTA = 2  # raw XOR base chunk, then byte-grouped zstd
ZSTD_LEVEL = 1  # measured: faster than 3 and no larger on bf16 weights
# zstd level 1 tuned for byte planes of weights (measured on 4 MiB chunks of a bf16 llama and
# all-MiniLM's f32: 1.8-2.4x faster to compress, ~2x faster to decode, 1-2% smaller; XOR deltas
# as small and as fast): its match finder spends most of the time on the exponent plane, whose
# short matches cost more bits than Huffman-coded literals. Matches of 7+ bytes only, from a
# small hash table, keep the long runs (zeros, repeated rows) and skip the rest.
ZSTD_PARAMS = {"strategy": zstandard.STRATEGY_FAST, "min_match": 7, "hash_log": 8, "window_log": 20}
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
        params = zstandard.ZstdCompressionParameters.from_level(ZSTD_LEVEL, **ZSTD_PARAMS)
        c = _local.cctx = zstandard.ZstdCompressor(compression_params=params)
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


def _declared_size(payload: bytes | memoryview, raw_size: int) -> int:
    """The size the zstd frame announces (-1: none), refused when more than ``raw_size``."""
    declared: int = zstandard.frame_content_size(payload)
    if declared > raw_size:
        raise ChunkTooLargeError(f"its zstd frame announces {declared} bytes, more than the {raw_size} declared")
    return declared


def _inflate_unsized(payload: bytes | memoryview, raw_size: int) -> bytes:
    """A frame that does not announce its size (mgit never writes one), read in bounded pieces."""
    reader = _decompressor().stream_reader(payload, read_across_frames=True)
    pieces, got = [], 0
    while piece := reader.read(min(raw_size + 1 - got, 2**20) or 1):
        pieces.append(piece)
        got += len(piece)
        if got > raw_size:
            raise ChunkTooLargeError(f"its zstd data holds more than the {raw_size} bytes declared")
    return b"".join(pieces)


def _inflate_into(payload: bytes | memoryview, out: npt.NDArray[np.uint8]) -> int:
    """Decompress the zstd frame straight into ``out`` (its length bounds the output: a
    frame announcing more is refused from its header); returns the bytes written.

    python-zstandard has no decompress-into, but a stream reader over an in-memory frame
    hands ``readinto``'s buffer to ZSTD_decompressStream, which decodes a whole frame that
    fits in one pass with the GIL released: no output allocation, no copy."""
    declared = _declared_size(payload, len(out))
    if declared < 0:
        data = _inflate_unsized(payload, len(out))
        out[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        return len(data)
    if declared == 0:
        return 0
    got: int = _decompressor().stream_reader(payload).readinto(out)
    return got


def thread_buffer(name: str, size: int) -> npt.NDArray[np.uint8]:
    """This thread's reusable byte buffer ``name``, at least ``size`` bytes (the planes a
    frame inflates to, a record read, a delta base decoded only to be XORed away): allocated
    once per thread, not per chunk, because a fresh buffer costs a page fault per 4 KiB on
    first touch (measured on a VM: ~1 GB/s, slower than the decode itself)."""
    buf: npt.NDArray[np.uint8] | None = getattr(_local, name, None)
    if buf is None or len(buf) < size:
        buf = np.empty(max(size, MAX_CHUNK_BYTES + 4096), dtype=np.uint8)
        setattr(_local, name, buf)
    return buf


# Elements un-grouped per step, so that a step's words, planes and base slice stay in cache across
# the shift, OR and XOR passes (2^16 … 2^21 measured within noise of each other on 4 MiB chunks).
_BLOCK = 1 << 18
_NO_BASE = np.empty(0, dtype=np.uint8)


def _ungroup_into(
    planes: npt.NDArray[np.uint8], group: int, out: npt.NDArray[np.uint8], base: npt.NDArray[np.uint8]
) -> None:
    """``out`` = ungroup(planes) XOR ``base`` over their common length (an empty ``base``: no
    XOR), in blocks; ``len(planes) == len(out)``, a multiple of ``group`` (2 or more). Elements
    are assembled with shifts of little-endian words (~3x faster than strided byte copies)."""
    m = len(out) // group
    src = planes.reshape(group, m)
    common = min(len(out), len(base))
    if group not in (2, 4, 8):
        out.reshape(m, group)[:] = src.T
        _xor_into(out, base, 0, common)
        return
    words = out.view(f"<u{group}")
    for s in range(0, m, _BLOCK):
        e = min(s + _BLOCK, m)
        w = words[s:e]
        np.copyto(w, src[group - 1, s:e])
        for i in range(group - 2, -1, -1):
            w <<= 8
            w |= src[i, s:e]
        _xor_into(out, base, s * group, min(e * group, common))


def _xor_into(out: npt.NDArray[np.uint8], base: npt.NDArray[np.uint8], lo: int, hi: int) -> None:
    """``out[lo:hi] ^= base[lo:hi]``, in place (nothing when ``hi <= lo``)."""
    if hi > lo:
        np.bitwise_xor(out[lo:hi], base[lo:hi], out=out[lo:hi])


def decode(
    encoding: int,
    payload: bytes | memoryview,
    group: int,
    raw_size: int,
    base: bytes | bytearray | memoryview | None = None,
    out: bytearray | memoryview | None = None,
) -> bytearray | memoryview:
    """The raw bytes, in a new writable buffer (callers may wrap it in a tensor), or in the
    first ``raw_size`` bytes of ``out`` (a writable buffer at least that long; the result is
    then a view of it). ``raw_size`` bounds the output: ChunkTooLargeError beyond it or
    beyond MAX_CHUNK_BYTES.

    Nothing is allocated but the result, and the chunk passes through memory once more
    than zstd alone needs: the frame inflates into this thread's reused buffer of planes
    (ungrouped chunks: straight into the result), un-grouping assembles the result from it
    in cache-sized blocks, and a delta's XOR is applied to each block in place. A decode
    bomb costs nothing: a frame announcing more than ``raw_size`` is refused from its
    header, one announcing nothing is read in bounded pieces."""
    check_raw_size(raw_size)
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown chunk encoding {encoding}")
    if encoding == XOR_DELTA and base is None:
        raise ValueError("delta chunk without its base")
    if out is None and encoding == RAW:
        return bytearray(payload)
    dest = np.empty(raw_size, dtype=np.uint8) if out is None else _into(out, raw_size)
    if encoding == RAW:
        if len(payload) != raw_size:
            raise ValueError(f"a raw record of {len(payload)} bytes, not the {raw_size} declared")
        dest[:] = np.frombuffer(payload, dtype=np.uint8)
        return dest.data
    ref = np.frombuffer(base, dtype=np.uint8) if encoding == XOR_DELTA and base is not None else _NO_BASE
    grouped = group > 1 and raw_size > 0 and raw_size % group == 0  # as group_bytes grouped them
    planes = thread_buffer("planes", raw_size)[:raw_size] if grouped else dest
    got = _inflate_into(payload, planes)
    if got != raw_size:
        raise ValueError(f"the zstd frame holds {got} bytes, not the {raw_size} declared")
    if grouped:
        _ungroup_into(planes, group, dest, ref)
    else:
        _xor_into(dest, ref, 0, min(raw_size, len(ref)))
    return dest.data


def chains_in_planes(links: list[tuple[int, int, int]]) -> bool:
    """Whether a delta chain, given as (encoding, group, raw size) from the chunk down to its
    keyframe, can be decoded in the grouped domain by :func:`decode_chain`: every link grouped
    alike (2 bytes or more) and of one raw size, so that XOR commutes with the grouping."""
    (_, group, size), keyframe = links[0], links[-1][0]
    return (
        len(links) >= 2
        and keyframe == GROUPED_ZSTD
        and all(e == XOR_DELTA for e, _, _ in links[:-1])
        and all((g, n) == (group, size) for _, g, n in links)
        and group > 1
        and size > 0
        and size % group == 0
    )


def decode_chain(
    payloads: list[bytes | memoryview], group: int, raw_size: int, out: bytearray | memoryview | None = None
) -> bytearray | memoryview:
    """The raw bytes at the top of a delta chain that :func:`chains_in_planes` accepts, from its
    payloads keyframe first: each delta's planes are XORed into the keyframe's, and the result is
    un-grouped once (grouping only permutes bytes, so XOR and grouping commute). Decoding each
    base on its own would un-group (and the caller verify) every link. Unverified: the caller
    checks the result against its id."""
    check_raw_size(raw_size)
    dest = np.empty(raw_size, dtype=np.uint8) if out is None else _into(out, raw_size)
    acc = thread_buffer("planes", raw_size)[:raw_size]
    step = thread_buffer("delta planes", raw_size)[:raw_size]
    for n, payload in enumerate(payloads):
        got = _inflate_into(payload, step if n else acc)
        if got != raw_size:
            raise ValueError(f"the zstd frame holds {got} bytes, not the {raw_size} declared")
        if n:
            np.bitwise_xor(acc, step, out=acc)
    _ungroup_into(acc, group, dest, _NO_BASE)
    return dest.data


def _into(out: bytearray | memoryview, raw_size: int) -> npt.NDArray[np.uint8]:
    """The first ``raw_size`` bytes of a caller's buffer, as a writable byte array."""
    dest = np.frombuffer(out, dtype=np.uint8)
    if len(dest) < raw_size or not dest.flags.writeable:
        raise ValueError(f"decoding {raw_size} bytes needs a writable buffer at least that long")
    return dest[:raw_size]
