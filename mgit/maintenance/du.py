"""Disk usage: what a commit holds (logical), what that is once deduplicated (unique),
and what it costs on disk (stored); and the same for the whole store.

dedup ratio = logical / unique raw bytes; compression ratio = unique raw / stored.
A delta-encoded chunk counts its own stored bytes; its base is counted where it belongs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import numpy as np

from mgit.graph.objects import Graph
from mgit.graph.snapshot import read_snapshot
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.store.chunkstore import ChunkStore
from mgit.store.codec import ENCODING_NAMES


@dataclass
class Usage:
    logical_bytes: int = 0
    unique_bytes: int = 0  # raw bytes of distinct chunks, plus blobs
    stored_bytes: int = 0  # on disk: distinct chunks as stored, plus blobs
    new_stored_bytes: int = 0  # stored bytes of chunks no parent has (a merge's: neither base nor experts)
    chunks: int = 0

    @property
    def dedup_ratio(self) -> float:
        return self.logical_bytes / self.unique_bytes if self.unique_bytes else 1.0

    @property
    def compression_ratio(self) -> float:
        return self.unique_bytes / self.stored_bytes if self.stored_bytes else 1.0


@dataclass
class StoreUsage:
    packs: int = 0
    chunks: int = 0
    raw_bytes: int = 0
    stored_bytes: int = 0
    by_encoding: dict[str, int] = field(default_factory=dict)  # encoding → chunks

    @property
    def compression_ratio(self) -> float:
        return self.raw_bytes / self.stored_bytes if self.stored_bytes else 1.0


def commit_chunks(graph: Graph, commit: str) -> tuple[int, dict[str, int], int]:
    """(logical bytes, distinct chunk id → raw size, blob bytes) of one commit."""
    logical, chunks, blobs = 0, {}, 0
    for path, entry in read_snapshot(graph, graph.commit(commit).tree).items():
        if entry.kind == "blob":
            size = len(graph.blob(entry.oid))
            logical += size
            blobs += size
        elif entry.kind == "safetensors":
            stored = load_safetensors(graph, entry.oid, path)
            logical += stored.file_size
            blobs += len(stored.layout.header)
            for m in stored.manifests.values():
                chunks.update({c.id: c.size for c in m.chunks})
        else:
            manifest = load_chunked(graph, entry.oid)
            logical += manifest.size
            chunks.update({c.id: c.size for c in manifest.chunks})
    return logical, chunks, blobs


def commit_usage(graph: Graph, store: ChunkStore, commit: str) -> Usage:
    logical, chunks, blobs = commit_chunks(graph, commit)
    parents = graph.commit(commit).parents
    parent_chunks = {cid for p in parents for cid in commit_chunks(graph, p)[1]}  # a merge's experts too
    usage = Usage(logical_bytes=logical, unique_bytes=sum(chunks.values()) + blobs, chunks=len(chunks))
    usage.stored_bytes = blobs
    for cid in chunks:
        size = store.stored_size(cid) if store.has(cid) else 0
        usage.stored_bytes += size
        if cid not in parent_chunks:
            usage.new_stored_bytes += size
    return usage


def measure_store(store: ChunkStore) -> StoreUsage:
    usage = StoreUsage()
    encodings: Counter[str] = Counter()
    for idx in store.indexes():
        usage.packs += 1
        usage.chunks += len(idx)
        usage.raw_bytes += int(idx.entries["raw_size"].sum())
        usage.stored_bytes += int(idx.entries["length"].sum())
        for code, count in zip(*np.unique(idx.entries["encoding"], return_counts=True), strict=True):
            encodings[ENCODING_NAMES.get(int(code), str(code))] += int(count)
    for cid in store.loose_ids():
        usage.chunks += 1
        usage.stored_bytes += store.loose.stored_size(cid)
        encodings["loose"] += 1
    usage.by_encoding = dict(sorted(encodings.items()))  # by name: the same JSON whatever order the packs list in
    return usage
