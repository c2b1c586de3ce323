"""Damage to stored data, for tests of how mgit reports it."""

from __future__ import annotations

from mgit.store.chunkstore import ChunkStore


def flip_last_byte(store: ChunkStore, cid: str) -> None:
    """Flip the last byte of chunk ``cid``'s record in its pack: it no longer verifies."""
    loc = store.location(cid)
    assert loc is not None
    with open(loc.pack, "r+b") as f:
        f.seek(loc.offset + loc.length - 1)
        last = f.read(1)
        f.seek(loc.offset + loc.length - 1)
        f.write(bytes([last[0] ^ 0xFF]))
