"""Reusable per-thread chunk buffers for one merge (the engine's)."""

from __future__ import annotations

import threading


class ChunkBuffers:
    """One merge's reusable chunk buffers, per thread. A chunk merge decodes its inputs and writes
    its result into these instead of fresh allocations: first touches of fresh memory cost a page
    fault per 4 KiB, dearer here than decoding. Everything a chunk's merge puts in them is used
    before the same thread merges its next chunk (the ingestor hashes, measures and stores the
    result, and takes the base chunk as its delta base, in the same call).

    They hold (K + 2) chunks per thread, idle while a sparsifier decides on whole tensors, which
    is when a merge needs the most memory: :meth:`drop` frees them then (no chunk is being merged;
    the next chunks fault them in again, a few ms)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, list[bytearray]] = {}  # thread id -> its buffers by slot

    def get(self, slot: int, size: int) -> memoryview:
        """This thread's buffer number ``slot``, ``size`` bytes of it."""
        with self._lock:
            held = self._held.setdefault(threading.get_ident(), [])
        while len(held) <= slot:
            held.append(bytearray())
        if len(held[slot]) < size:
            held[slot] = bytearray(size)
        return memoryview(held[slot])[:size]

    def drop(self) -> None:
        with self._lock:
            self._held.clear()
