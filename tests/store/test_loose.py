"""Format-1 loose chunks (store/loose.py): read, verified, and looked for only when the
store has a loose directory at all."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from mgit.errors import CorruptObjectError
from mgit.store import codec
from mgit.store.chunkstore import ChunkStore
from mgit.store.loose import LooseChunks
from mgit.store.record import chunk_id


def _write_loose(root: Path, raw: bytes, magic: bytes = b"MGC1", encoding: int | None = None) -> str:
    cid = chunk_id(raw)
    enc, payload = codec.encode(raw, 2)
    path = root / cid[:2] / cid[2:]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<4sBBxxQ", magic, enc if encoding is None else encoding, 2, len(raw)) + payload)
    return cid


def test_a_store_without_loose_chunks_never_looks_for_a_loose_file(tmp_path, monkeypatch):
    store = ChunkStore(tmp_path / "chunks")
    cid = store.put(b"\x01\x02" * 5000, 2).cid
    store.seal()
    monkeypatch.setattr(LooseChunks, "path", lambda self, c: pytest.fail("looked for a loose file"))
    assert store.has(cid) and not store.has("ab" * 32)
    with pytest.raises(CorruptObjectError, match="missing from the store"):
        store.get("ab" * 32)
    assert list(store.loose_ids()) == []


def test_loose_chunks_are_read_verified_and_exported_as_keyframes(tmp_path):
    root = tmp_path / "chunks"
    raw = b"\x00\x01" * 40_000
    cid = _write_loose(root, raw)
    store = ChunkStore(root)
    assert store.has(cid) and list(store.loose_ids()) == [cid]
    assert bytes(store.get(cid)) == raw
    rec = store.export(cid)
    assert (rec.cid, rec.depth, rec.base, rec.raw_size) == (cid, 0, None, len(raw))
    assert store.payload_size(cid) == len(rec.payload)


@pytest.mark.parametrize("damage", ["magic", "delta", "payload"])
def test_a_damaged_loose_chunk_fails_verification(tmp_path, damage):
    root = tmp_path / "chunks"
    raw = b"\x00\x01" * 40_000
    if damage == "magic":
        cid = _write_loose(root, raw, magic=b"XXXX")
    elif damage == "delta":
        cid = _write_loose(root, raw, encoding=codec.XOR_DELTA)
    else:
        cid = _write_loose(root, raw)
        path = root / cid[:2] / cid[2:]
        data = bytearray(path.read_bytes())
        data[-5] ^= 0xFF
        path.write_bytes(bytes(data))
    with pytest.raises(CorruptObjectError, match="fails verification"):
        ChunkStore(root).get(cid)
