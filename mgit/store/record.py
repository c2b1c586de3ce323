"""The chunk record: how one stored chunk is laid out (in a pack, on the wire), and the one
decode-and-verify, ``decode_verified``.

Every chunk read, received or uploaded is checked against its id here, so changing the chunk
encoding touches codec.py and this module (and docs/format.md) only. The framings:
docs/format.md §4.3; docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

import blake3

from mgit.store import codec

# pack header: id, encoding, byte-group width, delta depth, pad, payload length, raw size
RECORD = struct.Struct("<32sBBBBIQ")  # the pad byte is always 0
BASE_LEN = 32  # a delta record's base chunk id follows its pack header
WIRE_MAGIC = b"MGCR"
WIRE_VERSION = 1
WIRE = struct.Struct("<4sBBBxQ32s")  # magic, version, encoding, group, raw size, delta base (zeros: none)
# A delta at most this share of the raw size is taken without also trying the plain
# encoding: byte-grouped zstd of float weights stays above ~0.6x, so trying it would
# cost a second compression (~40 % of an add's or a merge's CPU) for nothing.
SURE_DELTA = 0.5

RawBytes = bytes | bytearray | memoryview  # a chunk's raw bytes, as read, decoded or received


class RecordError(ValueError):
    """A record that cannot be taken: its framing is not a record, or its bytes are not its chunk."""


class NotARecordError(RecordError):
    """Bytes that are not a record of this framing (bad magic or version, or too short)."""


class UnknownEncodingError(RecordError):
    """A record using an encoding this mgit does not know."""


class MismatchError(RecordError):
    """A record that does not decode, or decodes to bytes other than its id names."""


def chunk_id(raw: RawBytes) -> str:
    """A chunk's id: the BLAKE3 of its raw bytes, in hex."""
    return blake3.blake3(raw).hexdigest()


def has_base(encoding: int) -> bool:
    """Whether records of this encoding carry a base chunk id (a delta)."""
    return encoding in codec.DELTAS


@dataclass(frozen=True)
class Record:
    """One chunk as stored (``payload`` may be a zero-copy view of a mapped pack)."""

    cid: str
    encoding: int
    group: int
    depth: int
    raw_size: int
    payload: bytes | memoryview
    base: str | None = None

    @property
    def is_delta(self) -> bool:
        return has_base(self.encoding)

    def to_bytes(self) -> bytes:
        """The record framed for a pack."""
        head = RECORD.pack(
            bytes.fromhex(self.cid), self.encoding, self.group, self.depth, 0, len(self.payload), self.raw_size
        )
        return head + (bytes.fromhex(self.base) if self.base else b"") + self.payload


@dataclass(frozen=True)
class Header:
    """A pack record's header as found at ``offset``; ``end`` is where the record ends
    (it may lie past the buffer: the caller decides what a truncated record means)."""

    cid: str
    encoding: int
    group: int
    depth: int
    pad: int
    raw_size: int
    base: str | None
    payload_start: int
    end: int


def pack_length(encoding: int, payload_length: int) -> int:
    """How many bytes a pack record with this encoding and payload length occupies."""
    return RECORD.size + (BASE_LEN if has_base(encoding) else 0) + payload_length


def payload_length(encoding: int, record_length: int) -> int:
    """The payload length of a pack record of this encoding occupying ``record_length`` bytes."""
    return record_length - RECORD.size - (BASE_LEN if has_base(encoding) else 0)


def read_header(buf: bytes | memoryview, offset: int = 0) -> Header:
    """The pack record header at ``offset`` (struct.error when it does not fit in ``buf``)."""
    raw_id, encoding, group, depth, pad, length, raw_size = RECORD.unpack_from(buf, offset)
    start = offset + RECORD.size
    base = None
    if has_base(encoding):
        base = bytes(buf[start : start + BASE_LEN]).hex()
        start += BASE_LEN
    return Header(raw_id.hex(), encoding, group, depth, pad, raw_size, base, start, start + length)


def parse(buf: bytes | memoryview, offset: int = 0) -> Record:
    """The pack record at ``offset``; its payload is a slice of ``buf`` (zero-copy for a
    memoryview). ValueError when it runs past the end of ``buf``."""
    head = read_header(buf, offset)
    if head.end > len(buf):
        raise ValueError("record runs past the end of its pack")
    payload = buf[head.payload_start : head.end]
    return Record(head.cid, head.encoding, head.group, head.depth, head.raw_size, payload, head.base)


def wire_size(payload_size: int) -> int:
    """How many bytes :func:`to_wire` makes of a record whose payload has this length."""
    return WIRE.size + payload_size


def to_wire(record: Record) -> bytes:
    """The record framed for a remote (no depth: the receiver works it out)."""
    base = bytes.fromhex(record.base) if record.base else bytes(32)
    return WIRE.pack(WIRE_MAGIC, WIRE_VERSION, record.encoding, record.group, record.raw_size, base) + record.payload


def from_wire(cid: str, data: bytes) -> Record:
    """The record a remote sent for ``cid``, not yet decoded: NotARecordError for bytes that
    are not one, codec.ChunkTooLargeError for one declaring more than a chunk may hold
    (refused before any decoding: a few KiB of zstd can claim a GiB)."""
    try:
        magic, version, encoding, group, raw_size, base = WIRE.unpack_from(data)
    except struct.error:
        raise NotARecordError("too short for a chunk record") from None
    if magic != WIRE_MAGIC or version != WIRE_VERSION:
        raise NotARecordError("not a chunk record")
    codec.check_raw_size(raw_size)
    base_id = base.hex() if any(base) else None
    return Record(cid, encoding, group, 0, raw_size, data[WIRE.size :], base_id)


def check_header(record: Record) -> None:
    """What can be refused before decoding anything, the delta base included:
    codec.ChunkTooLargeError for a raw size no chunk may have, UnknownEncodingError."""
    codec.check_raw_size(record.raw_size)
    if record.encoding not in codec.ENCODINGS:
        raise UnknownEncodingError(f"uses encoding {record.encoding}, unknown to this mgit")


def decode_verified(
    record: Record, base: RawBytes | None = None, out: bytearray | memoryview | None = None
) -> bytearray | memoryview:
    """The record's raw bytes (a new writable buffer, or a view of the first raw-size bytes
    of ``out``), checked against its id; ``base``: the raw bytes of the delta base.
    codec.ChunkTooLargeError for a record whose raw size, or zstd frame, claims more than a
    chunk may hold (refused before it inflates); MismatchError for anything else that fails:
    an unknown encoding, a missing base, bytes that do not decode, or that decode to a chunk
    other than ``record.cid``. The check hashes on the calling thread with the GIL released
    (blake3's default ``max_threads=1``: the callers already decode on every core)."""
    try:
        raw = codec.decode(record.encoding, record.payload, record.group, record.raw_size, base, out)
    except codec.ChunkTooLargeError:
        raise
    except codec.DECODE_ERRORS:
        raise MismatchError("does not decode") from None
    if len(raw) != record.raw_size or chunk_id(raw) != record.cid:
        raise MismatchError("does not match its id")
    return raw


def encode(
    cid: str, raw: RawBytes, group: int, base: tuple[str, RawBytes, int] | None = None, opaque: bool = False
) -> Record:
    """The record to store for ``raw``: with ``base`` (id, raw bytes, the depth the delta
    would have) the smallest of delta / byte-grouped zstd / raw, except that a delta of
    at most SURE_DELTA of the raw size is taken without trying the others; without it, the
    smaller of byte-grouped zstd and raw. The delta is a patch delta for ``opaque`` bytes (a
    chunk of a large non-tensor file), else a difference delta wherever both chunks are whole
    elements of 2, 4 or 8 bytes (weights: smaller and faster than XOR), else an XOR delta."""
    delta = None
    if base is not None:
        kind, payload = codec.encode_against(raw, base[1], group, opaque)
        delta = Record(cid, kind, group, base[2], len(raw), payload, base[0])
    if delta is not None and len(delta.payload) <= SURE_DELTA * len(raw):
        return delta
    encoding, payload = codec.encode(raw, group)
    if delta is not None and len(delta.payload) < len(payload):
        return delta
    return Record(cid, encoding, group, 0, len(raw), payload)
