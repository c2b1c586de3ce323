"""The one chunk-record codec (store/record.py): both framings round-trip, and
decode_verified refuses every tampered record."""

from __future__ import annotations

import numpy as np
import pytest

from mgit.store import codec, record
from mgit.store.record import Record, chunk_id


def _weights(seed: int = 0, n: int = 20_000) -> bytes:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32) * 0.02).tobytes()


def _stored(raw: bytes, group: int = 4) -> Record:
    return record.encode(chunk_id(raw), raw, group)


def test_pack_framing_round_trips_keyframe_and_delta():
    raw = _weights()
    key = _stored(raw)
    assert key.encoding == codec.GROUPED_ZSTD and not key.is_delta
    data = key.to_bytes()
    assert len(data) == record.pack_length(key.encoding, len(key.payload))
    assert record.parse(data) == Record(key.cid, key.encoding, key.group, 0, len(raw), key.payload, None)
    near = bytearray(raw)
    near[::97] = bytes(len(near[::97]))
    delta = record.encode(chunk_id(bytes(near)), bytes(near), 4, (key.cid, raw, 1))
    assert delta.is_delta and delta.base == key.cid and delta.depth == 1
    framed = b"junk" + delta.to_bytes()
    back = record.parse(memoryview(framed), 4)
    assert isinstance(back.payload, memoryview)  # zero-copy from a mapping
    assert (back.cid, back.encoding, back.depth, back.base, bytes(back.payload)) == (
        delta.cid,
        codec.DIFF_DELTA,
        1,
        key.cid,
        delta.payload,
    )
    head = record.read_header(framed, 4)
    assert head.end == len(framed) and record.payload_length(head.encoding, head.end - 4) == len(delta.payload)
    assert bytes(record.decode_verified(back, raw)) == bytes(near)


def test_wire_framing_round_trips_without_depth():
    raw = _weights(1)
    rec = _stored(raw)
    wire = record.to_wire(rec)
    assert len(wire) == record.wire_size(len(rec.payload))
    back = record.from_wire(rec.cid, wire)
    assert (back.encoding, back.group, back.raw_size, back.base, back.payload) == (
        rec.encoding,
        rec.group,
        rec.raw_size,
        None,
        rec.payload,
    )
    assert bytes(record.decode_verified(back)) == raw


def test_a_truncated_pack_record_is_refused():
    data = _stored(_weights(2)).to_bytes()
    with pytest.raises(ValueError, match="runs past the end"):
        record.parse(data[:-1])


def test_wire_bytes_that_are_not_a_record_are_refused():
    wire = record.to_wire(_stored(_weights(3)))
    for bad in (b"MGCR", b"XXXX" + wire[4:], wire[:4] + b"\x02" + wire[5:]):
        with pytest.raises(record.NotARecordError):
            record.from_wire("ab" * 32, bad)


def test_a_record_claiming_more_than_a_chunk_is_refused_before_decoding():
    header = record.WIRE.pack(record.WIRE_MAGIC, 1, codec.GROUPED_ZSTD, 1, 2**40, bytes(32))
    with pytest.raises(codec.ChunkTooLargeError):
        record.from_wire("ab" * 32, header + b"\x00" * 8)
    with pytest.raises(codec.ChunkTooLargeError):
        record.check_header(Record("ab" * 32, codec.RAW, 1, 0, codec.MAX_CHUNK_BYTES + 1, b""))


def test_an_unknown_encoding_is_refused():
    with pytest.raises(record.UnknownEncodingError, match="encoding 7"):
        record.check_header(Record("ab" * 32, 7, 1, 0, 3, b"abc"))
    with pytest.raises(record.MismatchError):
        record.decode_verified(Record(chunk_id(b"abc"), 7, 1, 0, 3, b"abc"))


@pytest.mark.parametrize("what", ["payload", "cid", "raw_size", "group", "no base", "wrong base"])
def test_decode_verified_refuses_a_tampered_record(what):
    raw = _weights(4)
    rec = _stored(raw)
    other = _weights(5)
    if what == "payload":
        payload = bytearray(rec.payload)
        payload[len(payload) // 2] ^= 1
        rec = Record(rec.cid, rec.encoding, rec.group, 0, rec.raw_size, bytes(payload))
    elif what == "cid":
        rec = Record(chunk_id(other), rec.encoding, rec.group, 0, rec.raw_size, rec.payload)
    elif what == "raw_size":
        rec = Record(rec.cid, codec.RAW, 1, 0, len(raw) + 1, raw)
    elif what == "group":
        rec = Record(rec.cid, rec.encoding, 2, 0, rec.raw_size, rec.payload)
    else:
        base = _weights(6)
        delta = record.encode(rec.cid, raw, 4, (chunk_id(base), base, 1))
        rec = Record(delta.cid, codec.XOR_DELTA, 4, 1, len(raw), codec.encode_delta(raw, base, 4), delta.base)
        with pytest.raises(record.MismatchError):
            record.decode_verified(rec, None if what == "no base" else other)
        return
    with pytest.raises(record.MismatchError):
        record.decode_verified(rec)


def test_bytes_that_are_no_zstd_frame_are_refused_and_a_bug_in_decoding_is_not(monkeypatch):
    """Only what damaged bytes raise (zstd's errors, ValueError) means "does not decode": any
    other exception is a bug in mgit, and surfaces as itself instead of as damage."""
    raw = _weights(7)
    garbage = Record(chunk_id(raw), codec.GROUPED_ZSTD, 4, 0, len(raw), b"\x28\xb5\x2f\xfd" + b"\xff" * 40)
    with pytest.raises(record.MismatchError, match="does not decode"):
        record.decode_verified(garbage)

    def broken(*args: object, **kwargs: object) -> bytes:
        raise TypeError("a bug")

    stored = _stored(raw)
    monkeypatch.setattr(codec, "decode", broken)
    with pytest.raises(TypeError, match="a bug"):
        record.decode_verified(stored)


def test_raw_wins_when_compression_saves_too_little():
    noise = np.random.default_rng(7).integers(0, 256, 10_000, dtype=np.uint8).tobytes()
    rec = _stored(noise, 1)
    assert rec.encoding == codec.RAW and rec.payload == noise and rec.base is None
    assert bytes(record.decode_verified(rec)) == noise
