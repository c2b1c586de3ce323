"""Why ``fsck --repair`` never leaves a delta chain longer than MAX_DELTA_DEPTH: a chunk is
stored with the depth of its chain *here* (``ChunkStore.receive`` counts from the local base),
and a damaged delta base is dropped together with every delta whose chain runs through it, so
a base fetched again never sits under deltas whose recorded depth assumed its old record."""

from __future__ import annotations

import os

from mgit.maintenance.fsck import bad_chunks
from mgit.store.chunkstore import MAX_DELTA_DEPTH


def _changed(raw: bytes, at: int) -> bytes:
    out = bytearray(raw)
    out[at : at + 8] = os.urandom(8)
    return bytes(out)


def test_a_damaged_delta_base_takes_every_delta_on_it_with_it(repo):
    store = repo.store
    raws = [os.urandom(1 << 14)]
    ids = [store.put(raws[0], 4).cid]  # a keyframe, then a chain of deltas on it
    for depth in range(1, MAX_DELTA_DEPTH + 1):
        raws.append(_changed(raws[-1], 8 * depth))
        put = store.put(raws[-1], 4, base=(ids[-1], raws[-2]))
        assert put.base == ids[-1] and store.depth(put.cid) == depth
        ids.append(put.cid)
    store.seal()
    loc = store.location(ids[0])
    with open(loc.pack, "r+b") as f:
        f.seek(loc.offset + loc.length - 1)
        last = f.read(1)
        f.seek(loc.offset + loc.length - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    store.forget_indexes()
    assert set(bad_chunks(store, repo.ctx.pool)) == set(ids)
    repo.fsck_repair()  # no remote holds them: all dropped, none kept above a base it lacks
    assert store.ids() & set(ids) == set()
