"""The patch delta (encoding 4): zstd of a chunk with its base chunk as a raw-content dictionary.

Why: a chunk of a large non-tensor file has no elements to subtract or XOR, and an edit may
move its bytes; zstd's patch-from finds them wherever they went. It must decode only with its
base, to exactly its chunk (verified against the id), be chosen only where it is smaller, and
follow the same base rules as the other deltas: depth at most 4, base present before the delta.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.errors import CorruptObjectError
from mgit.store import codec, patch, record
from mgit.store.chunkstore import MAX_DELTA_DEPTH, ChunkStore
from mgit.store.record import Record, chunk_id


def _random(n: int, seed: int = 0) -> bytes:
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def _patch(raw: bytes, base: bytes) -> Record:
    return record.encode(chunk_id(raw), raw, 1, (chunk_id(base), base, 1), opaque=True)


@settings(max_examples=40)
@given(
    size=st.integers(1, 300_000),
    edit=st.sampled_from(["insert", "delete", "overwrite", "append", "truncate"]),
    at=st.floats(0, 1),
    n=st.integers(1, 5000),
)
def test_a_patch_decodes_to_its_chunk_only_with_its_base(size, edit, at, n):
    base = _random(size)
    i, new = int(at * size), _random(n, seed=1)
    raw = {
        "insert": base[:i] + new + base[i:],
        "delete": base[:i] + base[i + n :],
        "overwrite": base[:i] + new + base[i + n :],
        "append": base + new,
        "truncate": base[: max(1, size - n)],
    }[edit] or b"x"
    rec = _patch(raw, base)
    if rec.encoding != codec.PATCH_DELTA:  # smaller stored otherwise: a tiny chunk, a big edit
        assert len(rec.payload) <= len(raw) and rec.base is None
        return
    assert rec.base == chunk_id(base) and rec.depth == 1 and rec.group == 1
    if size >= 4096:  # (zstd finds few matches in a base of a few hundred bytes)
        assert len(rec.payload) <= n + 512  # the edit's own bytes, and where to copy the rest from
    assert bytes(record.decode_verified(rec, base)) == raw
    out = bytearray(len(raw) + 7)
    assert bytes(record.decode_verified(rec, memoryview(base), memoryview(out))) == raw
    with pytest.raises(record.MismatchError):
        record.decode_verified(rec, None)


def test_a_row_rewritten_or_bytes_inserted_cost_about_their_own_size():
    base = _random(1 << 20)
    row = _random(4096, seed=2)
    rewritten = base[:500_000] + row + base[504_096:]
    inserted = base[:100] + b"seven b" + base[100:]
    assert len(_patch(rewritten, base).payload) < 4096 + 256
    assert len(_patch(inserted, base).payload) < 256
    unrelated = _random(1 << 20, seed=3)
    assert _patch(unrelated, base).encoding == codec.RAW  # not a delta where it does not pay


def test_a_patch_against_the_wrong_base_fails_verification():
    base = _random(200_000)
    raw = base[:1000] + b"edit" + base[1000:]
    wrong = bytearray(base)
    wrong[50_000] ^= 1
    with pytest.raises(record.MismatchError):
        record.decode_verified(_patch(raw, base), bytes(wrong))


def test_a_patch_frame_claiming_more_than_its_record_is_refused_before_inflating():
    base = _random(10_000)
    raw = base[:5000] + b"!" + base[5000:]
    rec = _patch(raw, base)
    bomb = patch.encode(raw * 50, base)  # a frame announcing 50 times the record's raw size
    hostile = Record(rec.cid, rec.encoding, rec.group, rec.depth, rec.raw_size, bomb, rec.base)
    with pytest.raises(codec.ChunkTooLargeError):
        record.decode_verified(hostile, base)


def test_patch_chains_stop_at_the_maximum_depth_and_read_back(tmp_path):
    """Each version of a file's chunk a patch of the one before: the fifth link is a keyframe."""
    store = ChunkStore(tmp_path)
    versions = [_random(300_000)]
    for k in range(MAX_DELTA_DEPTH + 2):
        prev = versions[-1]
        versions.append(prev[: 1000 * k] + os.urandom(16) + prev[1000 * k :])
    ids = [store.put(versions[0], 1).cid]
    for prev, raw in zip(versions[:-1], versions[1:], strict=True):
        ids.append(store.put(raw, 1, base=(ids[-1], prev), opaque=True).cid)
    depths = [store.depth(c) for c in ids]
    assert depths == [0, 1, 2, 3, 4, 0, 1]
    assert all(store.location(c).encoding == codec.PATCH_DELTA for c, d in zip(ids, depths, strict=True) if d)
    store.seal()
    store.forget_indexes()
    assert [bytes(store.get(c)) for c in ids] == versions


def test_a_patch_is_received_only_after_its_base(tmp_path):
    here, there = ChunkStore(tmp_path / "a"), ChunkStore(tmp_path / "b")
    base = _random(100_000)
    raw = base[:10] + b"insert" + base[10:]
    bid = here.put(base, 1).cid
    cid = here.put(raw, 1, base=(bid, base), opaque=True).cid
    sent = record.from_wire(cid, record.to_wire(here.export(cid)))
    assert sent.encoding == codec.PATCH_DELTA and sent.base == bid
    with pytest.raises(CorruptObjectError, match="arrived before the chunk it is a delta of"):
        there.receive(sent)
    there.receive(record.from_wire(bid, record.to_wire(here.export(bid))))
    assert there.receive(sent).written > 0 and there.depth(cid) == 1
    assert bytes(there.get(cid)) == raw
