"""Writing a file's chunks keeps every worker busy past a slow chunk: the window of chunks in
flight is longer than two per worker (finished chunks wait as byte counts, not as bytes)."""

from __future__ import annotations

import os
import threading

from mgit.model.materialize import _write_chunks
from mgit.parallel import WORKERS, make_pool
from mgit.progress import Bar


class SlowFirstStore:
    """A store whose first chunk is decoded only once more than two chunks per worker after it are."""

    def __init__(self, chunks: dict[str, bytes]):
        self.chunks, self.others, self.go = chunks, [], threading.Event()

    def get(self, cid: str, what: str = "") -> bytes:
        if cid == "c0":
            assert self.go.wait(timeout=20), "no worker ran past the slow chunk"
        else:
            self.others.append(cid)
            if len(self.others) > 2 * WORKERS:
                self.go.set()
        return self.chunks[cid]


def test_workers_write_on_past_a_slow_chunk(tmp_path):
    chunks = {f"c{i}": bytes([i]) * (100 + i) for i in range(4 * WORKERS + 3)}
    parts = [(cid, len(data), "f") for cid, data in chunks.items()]
    store = SlowFirstStore(chunks)
    out = tmp_path / "out"
    fd = os.open(out, os.O_RDWR | os.O_CREAT)
    try:
        with make_pool() as pool:
            _write_chunks(store, pool, fd, 3, parts, None, Bar())  # type: ignore[arg-type]
    finally:
        os.close(fd)
    assert out.read_bytes() == bytes(3) + b"".join(chunks.values())
