"""Chunk encodings: byte-grouped zstd, a delta against a base chunk (XOR, or the elements'
difference), or raw; the patch delta of large non-tensor files is patch.py's.

Grouping bytes into planes lets zstd compress the exponents; a fine-tune's difference to its
parent leaves small numbers, which compress further. Why each: docs/design.md, "Notes from the
code".
"""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import numpy.typing as npt
import zstandard

from mgit import memory
from mgit.store import patch
from mgit.store.limits import MAX_CHUNK_BYTES

RAW = 0
GROUPED_ZSTD = 1
XOR_DELTA = 2  # raw XOR base chunk, then byte-grouped zstd
DIFF_DELTA = 3  # zigzag of (raw - base chunk) per little-endian element, then byte-grouped zstd
PATCH_DELTA = 4  # zstd of the raw bytes with the base chunk as a raw-content dictionary (patch.py)
DELTAS = (XOR_DELTA, DIFF_DELTA, PATCH_DELTA)  # the encodings that carry a base chunk
ZSTD_LEVEL = 1  # measured: faster than 3 and no larger on bf16 weights
# zstd level 1 tuned for byte planes of weights (measured on 4 MiB chunks of a bf16 llama and
# all-MiniLM's f32: 1.8-2.4x faster to compress, ~2x faster to decode, 1-2% smaller; XOR deltas
# as small and as fast): its match finder spends most of the time on the exponent plane, whose
# short matches cost more bits than Huffman-coded literals. Matches of 7+ bytes only, from a
# small hash table, keep the long runs (zeros, repeated rows) and skip the rest.
ZSTD_PARAMS = {"strategy": zstandard.STRATEGY_FAST, "min_match": 7, "hash_log": 8, "window_log": 20}
ENCODINGS = (RAW, GROUPED_ZSTD, XOR_DELTA, DIFF_DELTA, PATCH_DELTA)
# as `mgit du` shows them
ENCODING_NAMES = {RAW: "raw", GROUPED_ZSTD: "zstd", XOR_DELTA: "delta", DIFF_DELTA: "diff", PATCH_DELTA: "patch"}
DIFF_GROUPS = (2, 4, 8)  # element widths the difference delta is defined for
MIN_SAVING = 0.02  # store raw unless compression saves at least 2%

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
    shifts of whole little-endian words, block by block into this thread's reused buffer (on
    4 MiB bf16 chunks 3x faster than shifting the whole chunk into fresh buffers, 2.5x than a
    strided copy of bytes): the result is valid until this thread's next grouping, so callers
    compress it at once."""
    if group <= 1 or not len(raw) or len(raw) % group:
        return bytes(raw)
    if group not in (2, 4, 8):
        return np.frombuffer(raw, dtype=np.uint8).reshape(-1, group).T.tobytes()
    words = np.frombuffer(raw, dtype=f"<u{group}")
    planes = _grouped_planes(len(raw), group)
    shifted = _block_scratch("word block", words.dtype)
    for s in range(0, words.size, _BLOCK):
        block = words[s : s + _BLOCK]
        _split_into(block, planes, s, shifted[: block.size])
    return planes.data.cast("B")  # .data is memoryview(out); numpy declares ndarray a Buffer for Python >= 3.12 only


def _grouped_planes(nbytes: int, group: int) -> npt.NDArray[np.uint8]:
    """This thread's buffer for the byte planes of ``nbytes`` raw bytes, one row per plane."""
    return thread_buffer("grouped", nbytes)[:nbytes].reshape(group, nbytes // group)


def _split_into(
    words: npt.NDArray[np.unsignedinteger],
    planes: npt.NDArray[np.uint8],
    s: int,
    scratch: npt.NDArray[np.unsignedinteger],
) -> None:
    """``planes[i, s : s + len(words)]`` = byte i of each little-endian word; ``scratch``: a
    writable array like ``words`` for the shifted words (``words`` itself where it may be
    overwritten)."""
    e = s + words.size
    np.copyto(planes[0, s:e], words, casting="unsafe")
    for i in range(1, planes.shape[0]):
        np.right_shift(words if i == 1 else scratch, 8, out=scratch)
        np.copyto(planes[i, s:e], scratch, casting="unsafe")


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


def diffs(raw_size: int, base_size: int, group: int) -> bool:
    """Whether a chunk of ``raw_size`` bytes can be a difference delta against a base of
    ``base_size``: both whole elements of a width the encoding knows."""
    return group in DIFF_GROUPS and raw_size > 0 and raw_size % group == 0 and base_size % group == 0


def _diff_planes(raw: bytes | bytearray | memoryview, base: bytes | bytearray | memoryview, group: int) -> memoryview:
    """The byte planes of zigzag(raw − base) per little-endian element of ``group`` bytes,
    modulo 2^(8·group), and past the base's end (a chunk grown by appended rows) of the
    elements as they are, in this thread's grouping buffer (valid until its next grouping).
    Zigzag maps 0, −1, 1, −2 … to 0, 1, 2, 3 …, so that a small difference of either sign has
    zero high bytes; new rows keep their own patterns, which compress as weights do. Each block
    is differenced, zigzagged and split into its planes while it is in cache."""
    unsigned, signed = f"<u{group}", f"<i{group}"
    words = np.frombuffer(raw, dtype=unsigned)
    ref = np.frombuffer(base, dtype=unsigned)
    planes = _grouped_planes(len(raw), group)
    diff_all = _block_scratch("word block", unsigned)
    sign_all = _block_scratch("zigzag sign", signed)
    common = min(words.size, ref.size)
    for s in range(0, words.size, _BLOCK):
        e = min(s + _BLOCK, words.size)
        c = max(0, min(e, common) - s)
        block, q = diff_all[: e - s], sign_all[:c]
        block[c:] = words[s + c : e]
        if c:
            diff = block[:c]
            np.subtract(words[s : s + c], ref[s : s + c], out=diff)
            np.right_shift(diff.view(signed), 8 * group - 1, out=q)  # arithmetic: 0 or −1
            diff <<= 1
            diff ^= q.view(unsigned)
        _split_into(block, planes, s, block)
    return planes.data.cast("B")


def encode_against(
    raw: bytes | bytearray | memoryview, base: bytes | bytearray | memoryview, group: int, opaque: bool = False
) -> tuple[int, bytes]:
    """(encoding, payload) of ``raw`` as a delta against ``base``: for ``opaque`` bytes (no
    elements: a chunk of a large non-tensor file, whose edits move bytes) the patch delta; else
    the difference delta where :func:`diffs` allows it (smaller and cheaper on weights of every
    width), else XOR."""
    if opaque:
        return PATCH_DELTA, patch.encode(raw, base)
    if diffs(len(raw), len(base), group):
        return DIFF_DELTA, encode_diff(raw, base, group)
    return XOR_DELTA, encode_delta(raw, base, group)


def encode_diff(raw: bytes | bytearray | memoryview, base: bytes | bytearray | memoryview, group: int) -> bytes:
    """Payload of ``raw`` as a difference delta against ``base`` (:func:`diffs` must allow it):
    the zigzagged element differences, byte-grouped, zstd. On fine-tuned bf16 weights ~12%
    smaller than the XOR delta and ~25% faster to compress (fewer zstd sequences)."""
    return _compressor().compress(_diff_planes(raw, base, group))


class ChunkTooLargeError(ValueError):
    """A record whose raw bytes would be larger than any chunk the format allows."""


# What decoding damaged bytes raises: zstd's errors (not a frame, a frame that does not fit its
# dictionary) and ValueError (sizes that disagree: ours and numpy's). Anything else is a bug.
DECODE_ERRORS: tuple[type[Exception], ...] = (zstandard.ZstdError, ValueError)


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


def _inflate_unsized(payload: bytes | memoryview, raw_size: int, dctx: zstandard.ZstdDecompressor) -> bytes:
    """A frame that does not announce its size (mgit never writes one), read in bounded pieces."""
    reader = dctx.stream_reader(payload, read_across_frames=True)
    pieces, got = [], 0
    while piece := reader.read(min(raw_size + 1 - got, 2**20) or 1):
        pieces.append(piece)
        got += len(piece)
        if got > raw_size:
            raise ChunkTooLargeError(f"its zstd data holds more than the {raw_size} bytes declared")
    return b"".join(pieces)


def _inflate_into(
    payload: bytes | memoryview, out: npt.NDArray[np.uint8], dctx: zstandard.ZstdDecompressor | None = None
) -> int:
    """Decompress the zstd frame straight into ``out`` (its length bounds the output: a
    frame announcing more is refused from its header) with ``dctx`` (default: this thread's
    plain decompressor); returns the bytes written.

    python-zstandard has no decompress-into, but a stream reader over an in-memory frame
    hands ``readinto``'s buffer to ZSTD_decompressStream, which decodes a whole frame that
    fits in one pass with the GIL released: no output allocation, no copy."""
    dctx = _decompressor() if dctx is None else dctx
    declared = _declared_size(payload, len(out))
    if declared < 0:
        data = _inflate_unsized(payload, len(out), dctx)
        out[: len(data)] = np.frombuffer(data, dtype=np.uint8)
        return len(data)
    if declared == 0:
        return 0
    got: int = dctx.stream_reader(payload).readinto(out)
    return got


def thread_buffer(name: str, size: int) -> npt.NDArray[np.uint8]:
    """This thread's reusable byte buffer ``name``, at least ``size`` bytes (the planes a
    frame inflates to, a record read, a delta base decoded only to be XORed away): kept per
    thread by :func:`mgit.memory.scratch`, at least a chunk's size so that it is made once."""
    return memory.scratch(f"codec {name}", max(size, MAX_CHUNK_BYTES + 4096))


# Elements grouped or un-grouped per step, so that a step's words, planes and base slice stay in
# cache across the shift, OR, XOR and difference passes (on 4 MiB chunks, un-grouping: 2^16 … 2^21
# within noise of each other; a difference delta's encoding: 2^18 1.1x as fast as 2^16, 1.8x 2^14).
_BLOCK = 1 << 18
_NO_BASE = np.empty(0, dtype=np.uint8)


def _block_scratch(name: str, dtype: str | np.dtype[Any]) -> npt.NDArray[Any]:
    """This thread's reused buffer ``name`` as _BLOCK elements of ``dtype``: a block's words
    between the passes of grouping, un-grouping and the difference delta."""
    size = _BLOCK * np.dtype(dtype).itemsize
    return thread_buffer(name, size)[:size].view(dtype)


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
        _assemble(src, s, e, words[s:e])
        _xor_into(out, base, s * group, min(e * group, common))


def _assemble(src: npt.NDArray[np.uint8], s: int, e: int, words: npt.NDArray[np.unsignedinteger]) -> None:
    """``words`` = elements ``s … e`` of the byte planes ``src`` (one row per plane, plane 0 the
    lowest byte), as little-endian words of ``src``'s row count in bytes."""
    group = src.shape[0]
    np.copyto(words, src[group - 1, s:e])
    for i in range(group - 2, -1, -1):
        words <<= 8
        words |= src[i, s:e]


def _xor_into(out: npt.NDArray[np.uint8], base: npt.NDArray[np.uint8], lo: int, hi: int) -> None:
    """``out[lo:hi] ^= base[lo:hi]``, in place (nothing when ``hi <= lo``)."""
    if hi > lo:
        np.bitwise_xor(out[lo:hi], base[lo:hi], out=out[lo:hi])


def _undiff_into(
    planes: npt.NDArray[np.uint8], group: int, out: npt.NDArray[np.uint8], base: npt.NDArray[np.uint8]
) -> None:
    """``out`` = ``base`` + unzigzag(ungroup(planes)) per element, and past the base's end
    ungroup(planes) as it is: the inverse of :func:`_diff_planes`, in blocks. ``base`` may be
    ``out`` itself (a chain's link applied in place: each block is read before it is written);
    ``len(out)`` and ``len(base)`` are multiples of ``group``, one of DIFF_GROUPS."""
    unsigned = f"<u{group}"
    m = len(out) // group
    src = planes.reshape(group, m)
    words, ref = out.view(unsigned), base.view(unsigned)
    common = min(m, ref.size)
    t_all = _block_scratch("word block", unsigned)
    q_all = _block_scratch("zigzag sign", unsigned)
    for s in range(0, m, _BLOCK):
        e = min(s + _BLOCK, m)
        t, q = t_all[: e - s], q_all[: e - s]
        _assemble(src, s, e, t)
        c = max(0, min(e, common) - s)
        words[s + c : e] = t[c:]
        if c:
            diff, mask = t[:c], q[:c]
            np.bitwise_and(diff, 1, out=mask)
            np.negative(mask, out=mask)  # 0 or all ones
            diff >>= 1
            diff ^= mask
            np.add(diff, ref[s : s + c], out=words[s : s + c])


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
    in cache-sized blocks, and a delta's XOR (or sum) is applied to each block in place. A decode
    bomb costs nothing: a frame announcing more than ``raw_size`` is refused from its
    header, one announcing nothing is read in bounded pieces."""
    check_raw_size(raw_size)
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown chunk encoding {encoding}")
    if encoding in DELTAS and base is None:
        raise ValueError("delta chunk without its base")
    if encoding == DIFF_DELTA and base is not None and not diffs(raw_size, len(base), group):
        raise ValueError(f"a difference delta of {raw_size} bytes against {len(base)} in elements of {group}")
    if out is None and encoding == RAW:
        return bytearray(payload)
    dest = np.empty(raw_size, dtype=np.uint8) if out is None else _into(out, raw_size)
    if encoding == RAW:
        if len(payload) != raw_size:
            raise ValueError(f"a raw record of {len(payload)} bytes, not the {raw_size} declared")
        dest[:] = np.frombuffer(payload, dtype=np.uint8)
        return dest.data
    if encoding == PATCH_DELTA:  # the raw bytes themselves, copied in part from the base
        assert base is not None
        if _inflate_into(payload, dest, patch.decompressor(base)) != raw_size:
            raise ValueError(f"the zstd frame holds fewer than the {raw_size} bytes declared")
        return dest.data
    ref = np.frombuffer(base, dtype=np.uint8) if encoding in DELTAS and base is not None else _NO_BASE
    grouped = group > 1 and raw_size > 0 and raw_size % group == 0  # as group_bytes grouped them
    planes = thread_buffer("planes", raw_size)[:raw_size] if grouped else dest
    got = _inflate_into(payload, planes)
    if got != raw_size:
        raise ValueError(f"the zstd frame holds {got} bytes, not the {raw_size} declared")
    if encoding == DIFF_DELTA:
        _undiff_into(planes, group, dest, ref)
    elif grouped:
        _ungroup_into(planes, group, dest, ref)
    else:
        _xor_into(dest, ref, 0, min(raw_size, len(ref)))
    return dest.data


def decodes_as_chain(links: list[tuple[int, int, int]]) -> bool:
    """Whether a delta chain, given as (encoding, group, raw size) from the chunk down to its
    keyframe, can be decoded at once by :func:`decode_chain`: a byte-grouped keyframe, every link
    grouped alike (2 bytes or more) and of one raw size, XOR deltas only below difference deltas
    (XOR commutes with the grouping; a sum is applied to elements, after un-grouping)."""
    (_, group, size), keyframe = links[0], links[-1][0]
    upward = [e for e, _, _ in reversed(links[:-1])]  # the keyframe's delta first
    xors = next((i for i, e in enumerate(upward) if e != XOR_DELTA), len(upward))  # XOR links at the bottom
    return (
        len(links) >= 2
        and keyframe == GROUPED_ZSTD
        and all(e == DIFF_DELTA for e in upward[xors:])
        and all((g, n) == (group, size) for _, g, n in links)
        and group > 1
        and size > 0
        and size % group == 0
        and (xors == len(upward) or group in DIFF_GROUPS)
    )


def decode_chain(
    payloads: list[bytes | memoryview],
    encodings: list[int],
    group: int,
    raw_size: int,
    out: bytearray | memoryview | None = None,
) -> bytearray | memoryview:
    """The raw bytes at the top of a delta chain that :func:`decodes_as_chain` accepts, from its
    payloads and encodings keyframe first: the XOR deltas' planes are XORed into the keyframe's
    (grouping only permutes bytes, so XOR and grouping commute), the result is un-grouped once,
    and each difference delta is added to it in place. Decoding each base on its own would
    un-group (and the caller verify) every link. Unverified: the caller checks the result
    against its id."""
    check_raw_size(raw_size)
    dest = np.empty(raw_size, dtype=np.uint8) if out is None else _into(out, raw_size)
    acc = thread_buffer("planes", raw_size)[:raw_size]
    step = thread_buffer("delta planes", raw_size)[:raw_size]
    ungrouped = False
    for n, (payload, encoding) in enumerate(zip(payloads, encodings, strict=True)):
        got = _inflate_into(payload, step if n else acc)
        if got != raw_size:
            raise ValueError(f"the zstd frame holds {got} bytes, not the {raw_size} declared")
        if encoding == XOR_DELTA:
            np.bitwise_xor(acc, step, out=acc)
        elif encoding == DIFF_DELTA:
            if not ungrouped:
                _ungroup_into(acc, group, dest, _NO_BASE)
                ungrouped = True
            _undiff_into(step, group, dest, dest)
    if not ungrouped:
        _ungroup_into(acc, group, dest, _NO_BASE)
    return dest.data


def _into(out: bytearray | memoryview, raw_size: int) -> npt.NDArray[np.uint8]:
    """The first ``raw_size`` bytes of a caller's buffer, as a writable byte array."""
    dest = np.frombuffer(out, dtype=np.uint8)
    if len(dest) < raw_size or not dest.flags.writeable:
        raise ValueError(f"decoding {raw_size} bytes needs a writable buffer at least that long")
    return dest[:raw_size]
