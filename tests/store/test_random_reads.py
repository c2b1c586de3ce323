"""Scattered reads read only their record: inside ChunkStore.random_reads() a sealed record
is read with one pread of exactly its bytes (no mapping, so no read-ahead of neighbours);
outside it, reads go through the pack's mapping as before. prefetch() hints exact ranges."""

from __future__ import annotations

import contextlib
import os
import threading

import numpy as np
import pytest

from mgit.errors import CorruptObjectError
from mgit.store import pack
from mgit.store.chunkstore import ChunkStore


def _store(tmp_path, n: int = 6) -> tuple[ChunkStore, list[bytes], list[str]]:
    store = ChunkStore(tmp_path / "chunks")
    rng = np.random.default_rng(0)
    raws = [(rng.standard_normal(20_000).astype(np.float32) * 0.02).tobytes() for _ in range(n)]
    ids = [store.put(raw, 4).cid for raw in raws]
    base = store.put(raws[0][:-4] + b"\x00\x00\x80\x3f", 4, base=(ids[0], raws[0]))  # a delta of chunk 0
    store.seal()
    return ChunkStore(store.root), raws + [raws[0][:-4] + b"\x00\x00\x80\x3f"], ids + [base.cid]


@pytest.fixture
def preads(monkeypatch):
    """Every exact read of a pack: (fd, length, offset), by pread or by preadv into a buffer."""
    calls: list[tuple[int, int, int]] = []
    real_pread, real_preadv = os.pread, os.preadv

    def pread(fd: int, length: int, offset: int) -> bytes:
        calls.append((fd, length, offset))
        return real_pread(fd, length, offset)

    def preadv(fd: int, buffers, offset: int) -> int:
        calls.append((fd, sum(len(memoryview(b)) for b in buffers), offset))
        return real_preadv(fd, buffers, offset)

    monkeypatch.setattr(pack.os, "pread", pread)
    monkeypatch.setattr(pack.os, "preadv", preadv)
    return calls


def test_random_reads_pread_exactly_each_record(tmp_path, preads):
    store, raws, ids = _store(tmp_path)
    with store.random_reads():
        for k in (4, 1):
            assert bytes(store.get(ids[k])) == raws[k]
        assert bytes(store.get(ids[-1])) == raws[-1]  # a delta: itself, then its base, each exactly
    locs = [store.location(ids[k]) for k in (4, 1, 0, -1)]  # a delta's base is read before the delta
    assert [(length, offset) for _, length, offset in preads] == [(loc.length, loc.offset) for loc in locs]
    with store.random_reads():
        rec = store.read_record(locs[1])  # a record handed out is its own bytes, not a reused buffer
        store.get(ids[2])
    assert rec.cid == ids[1] and bytes(rec.payload) == bytes(store.export(ids[1]).payload)


def test_outside_random_reads_records_come_from_the_mapping(tmp_path, preads):
    store, raws, ids = _store(tmp_path)
    with store.random_reads():
        pass
    assert [bytes(store.get(cid)) for cid in ids] == raws
    assert preads == []


def test_random_reads_nest_and_end_on_error(tmp_path, preads):
    store, raws, ids = _store(tmp_path)
    with pytest.raises(RuntimeError), store.random_reads():
        with store.random_reads():
            store.get(ids[2])
        store.get(ids[3])  # still inside the outer context
        raise RuntimeError
    assert len(preads) == 2
    store.get(ids[2])
    assert len(preads) == 2


def test_random_reads_from_several_threads(tmp_path, preads):
    store, raws, ids = _store(tmp_path)
    bad = []

    def work(k: int) -> None:
        for _ in range(10):
            if bytes(store.get(ids[k])) != raws[k]:
                bad.append(k)

    with store.random_reads():
        threads = [threading.Thread(target=work, args=(k,)) for k in range(len(ids))]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert not bad and len(preads) >= 10 * len(ids)


def test_a_truncated_pack_read_exactly_is_corrupt(tmp_path):
    store, raws, ids = _store(tmp_path)
    loc = store.location(ids[-2])
    os.truncate(loc.pack, loc.offset + loc.length - 1)
    with store.random_reads(), pytest.raises(CorruptObjectError, match="bad record"):
        store.get(ids[-2])


def test_prefetch_advises_exactly_each_record(tmp_path, monkeypatch):
    store, raws, ids = _store(tmp_path)
    advice: list[tuple[int, int, int]] = []
    monkeypatch.setattr(pack.os, "posix_fadvise", lambda fd, off, length, how: advice.append((off, length, how)))
    store.prefetch([ids[3], "ab" * 32, ids[0]])
    want = [(store.location(c).offset, store.location(c).length) for c in (ids[3], ids[0])]
    assert [(o, n) for o, n, how in advice if how == os.POSIX_FADV_WILLNEED] == want
    assert bytes(store.get(ids[3])) == raws[3]


def test_get_decodes_into_the_callers_buffer(tmp_path):
    store, raws, ids = _store(tmp_path)
    buf = bytearray(len(raws[0]) + 10)
    for k in (0, 3, len(ids) - 1):  # a keyframe, another, a delta
        for exact in (False, True):
            with store.random_reads() if exact else contextlib.nullcontext():
                got = store.get(ids[k], out=buf)
            assert bytes(got) == raws[k] and bytes(buf[: len(raws[k])]) == raws[k]
            buf[:] = bytes(len(buf))
    whole = bytearray(b"\xee" * (2 * len(raws[0]) + 3))  # a tensor's bytes: chunks decode into their places
    n = len(raws[0])
    store.get(ids[-1], out=memoryview(whole)[3 : 3 + n])
    assert whole[:3] == b"\xee" * 3 and bytes(whole[3 : 3 + n]) == raws[-1] and whole[3 + n :] == b"\xee" * n
    with pytest.raises(CorruptObjectError):
        store.get(ids[0], out=bytearray(10))  # too small a buffer is refused, not overrun
