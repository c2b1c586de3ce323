"""Writing a file's chunks keeps every worker busy past a slow chunk: the window of chunks in
flight is longer than two per worker (finished chunks wait as byte counts, not as bytes)."""

from __future__ import annotations

import os
import threading

import numpy as np

from mgit.model import materialize
from mgit.model.materialize import Placed, write_chunks_at
from mgit.parallel import WORKERS, make_pool
from mgit.progress import Bar
from mgit.store.chunkstore import ChunkStore


def placed_from(start: int, parts: list[tuple[str, int]]) -> list[Placed]:
    """The chunks laid end to end from ``start``: (offset, id, size)."""
    items, at = [], start
    for cid, size in parts:
        items.append((at, cid, size))
        at += size
    return items


class SlowFirstStore:
    """A store whose first chunk is decoded only once more than two chunks per worker after it are."""

    def __init__(self, chunks: dict[str, bytes]):
        self.chunks, self.others, self.go = chunks, [], threading.Event()

    def get(self, cid: str) -> bytes:
        if cid == "c0":
            assert self.go.wait(timeout=20), "no worker ran past the slow chunk"
        else:
            self.others.append(cid)
            if len(self.others) > 2 * WORKERS:
                self.go.set()
        return self.chunks[cid]

    def location(self, cid: str) -> None:
        return None  # nowhere to read ahead


def test_workers_write_on_past_a_slow_chunk(tmp_path):
    chunks = {f"c{i}": bytes([i]) * (100 + i) for i in range(4 * WORKERS + 3)}
    parts = [(cid, len(data)) for cid, data in chunks.items()]
    store = SlowFirstStore(chunks)
    out = tmp_path / "out"
    fd = os.open(out, os.O_RDWR | os.O_CREAT)
    try:
        with make_pool() as pool:
            write_chunks_at(store, pool, fd, placed_from(3, parts), None, Bar(), out)  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert out.read_bytes() == bytes(3) + b"".join(chunks.values())


def test_every_record_is_read_ahead_before_it_is_decoded(tmp_path, monkeypatch):
    """Each chunk's record in its pack, and its delta base's, is advised (WILLNEED) before the
    chunk is read, and a window ahead: by the first read, more than one chunk was asked for."""
    rng = np.random.default_rng(0)
    store = ChunkStore(tmp_path / "chunks")
    bases = [rng.standard_normal(2000).astype(np.float32).tobytes() for _ in range(3 * WORKERS)]
    chunks = []
    for base in bases:
        b = store.put(base, 4)
        tuned = bytearray(base)
        tuned[8] ^= 1
        chunks.append((store.put(bytes(tuned), 4, base=(b.cid, base)).cid, len(tuned)))
    store.seal()
    store = ChunkStore(store.root)
    assert all(store.location(cid).base for cid, _ in chunks)  # deltas: their bases are read too
    events, lock = [], threading.Lock()
    advise, get = os.posix_fadvise, ChunkStore.get

    def advised(fd, offset, size, how):
        assert how == os.POSIX_FADV_WILLNEED
        with lock:
            events.append(("advise", offset))
        advise(fd, offset, size, how)

    def getting(self, cid, **kwargs):
        with lock:
            events.append(("get", self.location(cid).offset))
        return get(self, cid, **kwargs)

    monkeypatch.setattr(os, "posix_fadvise", advised)
    monkeypatch.setattr(ChunkStore, "get", getting)
    out = tmp_path / "out"
    fd = os.open(out, os.O_RDWR | os.O_CREAT)
    try:
        with make_pool() as pool:
            write_chunks_at(store, pool, fd, placed_from(0, chunks), None, Bar(), out)
    finally:
        os.close(fd)
    gets = [o for e, o in events if e == "get"]
    assert len(gets) == len(chunks)
    for cid, _ in chunks:
        loc = store.location(cid)
        first_get = events.index(("get", loc.offset))
        assert events.index(("advise", loc.offset)) < first_get
        assert events.index(("advise", store.location(loc.base).offset)) < first_get
    assert sum(1 for e, _ in events[: events.index(("get", gets[0]))] if e == "advise") > 2
    assert materialize.WINDOW > 2 * WORKERS
    assert out.read_bytes()[:10] == get(store, chunks[0][0])[:10]
