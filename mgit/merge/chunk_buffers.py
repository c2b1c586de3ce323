"""Reusable per-thread chunk buffers for one merge (the engine's)."""

from __future__ import annotations

from mgit import memory


class ChunkBuffers:
    """One merge's reusable chunk buffers, per thread (:func:`mgit.memory.scratch`). A chunk merge
    decodes its inputs and writes its result into these instead of fresh allocations: first
    touches of fresh memory cost a page fault per 4 KiB, dearer here than decoding. Everything a
    chunk's merge puts in them is used before the same thread merges its next chunk (the ingestor
    hashes, measures and stores the result, and takes the base chunk as its delta base, in the
    same call).

    They hold (K + 2) chunks per thread, idle while a sparsifier decides on whole tensors, which
    is when a merge needs the most memory: :meth:`drop` frees them then, with every other scratch
    buffer (no chunk is being merged; the next chunks fault them in again, a few ms)."""

    def get(self, slot: int, size: int) -> memoryview:
        """This thread's buffer number ``slot``, ``size`` bytes of it."""
        return memory.scratch(f"merge chunk {slot}", size).data[:size]

    def drop(self) -> None:
        memory.release()
