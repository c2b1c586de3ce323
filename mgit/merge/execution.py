"""What executing a merge plan produced and read: the new file entries and statistics, each
tensor's decision, the bytes read (counted from the pool's threads) and the output chunks
computed or carried (see :mod:`mgit.merge.engine`)."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from mgit.graph.snapshot import Entry
from mgit.model.materialize import StagedFile
from mgit.store.chunkstore import ReadCounters


@dataclass
class Execution:
    files: dict[str, Entry] = field(default_factory=dict)
    stats: dict[str, list] = field(default_factory=dict)  # file → relative chunk statistics vs the base
    decisions: dict[str, str] = field(default_factory=dict)  # tensor → merged | copied
    base_bytes_read: int = 0
    expert_bytes_read: int = 0
    expert_chunks_read: int = 0
    chunks_computed: int = 0  # output chunks merged (read, computed, stored)
    chunks_carried: int = 0  # output chunks that are the base's, carried without reading anything
    bytes_computed: int = 0  # raw bytes of the merged chunks (what was encoded and hashed)
    base_bytes_fetched: int | None = None  # in a partial clone: bytes fetched before the merge ran
    expert_bytes_fetched: int | None = None
    staged: dict[str, StagedFile] = field(default_factory=dict)  # file → written beside the store, complete
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, base: ReadCounters, experts: ReadCounters, expert_chunks: int) -> None:
        """Add one read's costs (called from the pool's threads)."""
        with self._lock:
            self.base_bytes_read += base.stored_bytes
            self.expert_bytes_read += experts.stored_bytes
            self.expert_chunks_read += expert_chunks

    def tally(self, computed: int = 0, carried: int = 0, computed_bytes: int = 0) -> None:
        """Add output chunks merged (and their bytes) and chunks carried."""
        with self._lock:
            self.chunks_computed += computed
            self.chunks_carried += carried
            self.bytes_computed += computed_bytes
