"""Plain files past ``LARGE_FILE_BYTES`` (4 MiB, stored as chunks) in a three-way merge: merged by
lines like any text file, and stored back as ``add`` would store the result.

Versions over ``MAX_TEXT_BYTES`` (64 MiB) are not read (memory is ~10× the largest version): both
sides changing one is a ``binary`` conflict. Details: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import tempfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from mgit.errors import chunks_of
from mgit.graph.objects import Graph
from mgit.graph.snapshot import Entry
from mgit.model.filetree import load_chunked
from mgit.model.ingest import LARGE_FILE_BYTES, Ingestor
from mgit.store.chunkstore import ChunkStore

MAX_TEXT_BYTES = 64 << 20  # 64 MiB: the largest version of a chunked file merged by lines
PLAIN = ("blob", "chunked")


@dataclass(frozen=True)
class LargeFiles:
    """What merging chunked files needs besides the graph: the chunk store they are read from
    and stored in, and the pool that stores them."""

    store: ChunkStore
    pool: ThreadPoolExecutor


def is_large_text_case(entries: tuple[Entry | None, ...]) -> bool:
    """Plain files, a chunked one among them (a file may have crossed 4 MiB on one side)."""
    kinds = {e.kind for e in entries if e is not None}
    return kinds <= set(PLAIN) and "chunked" in kinds


def read_contents(graph: Graph, files: LargeFiles, entries: tuple[Entry | None, ...], path: str) -> list[bytes] | None:
    """Each version's bytes (an absent one: empty), or None when one is over ``MAX_TEXT_BYTES``."""
    manifests = {e.oid: load_chunked(graph, e.oid) for e in entries if e is not None and e.kind == "chunked"}
    if any(m.size > MAX_TEXT_BYTES for m in manifests.values()):
        return None
    out = []
    for e in entries:
        if e is None:
            out.append(b"")
        elif e.kind == "blob":
            out.append(graph.blob(e.oid))
        else:
            with chunks_of(path):
                out.append(b"".join(bytes(files.store.get(c.id)) for c in manifests[e.oid].chunks))
    return out


def store_merged(graph: Graph, files: LargeFiles, path: str, data: bytes, mode: int, ours: Entry) -> Entry:
    """The merged bytes stored as ``add`` stores a plain file of that size (chunks as deltas
    against ours' where ours is chunked)."""
    if len(data) <= LARGE_FILE_BYTES:
        return Entry("blob", graph.put_blob(data), mode)
    parent = load_chunked(graph, ours.oid) if ours.kind == "chunked" else None
    ingestor = Ingestor(graph, files.store, files.pool, parent_files=lambda rel: parent)
    with tempfile.NamedTemporaryFile(prefix="mgit-merge-") as tmp:
        tmp.write(data)
        tmp.flush()
        stored = ingestor.chunked_file(Path(tmp.name), path)
    return Entry("chunked", stored.oid, mode)
