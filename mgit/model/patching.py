"""A checkout that changes a small part of a clean working file writes only that part.

Switching between fine-tunes of one model (frozen layers, a LoRA merged into a few
projections, a budgeted merge) changes a few chunks of a multi-GB file. Writing the file
anew costs its whole size in writes even when every unchanged chunk is copied from the old
file; patching it in place writes only the chunks that differ, at their offsets. The
checkout's journal names the file before the first write, so a patch killed half way is
finished by the next command (it rewrites the file, re-verifying every chunk it copies from
it by hash, and decodes the overwritten ones from the store).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mgit.graph.objects import MODE_EXEC, Graph
from mgit.graph.snapshot import Entry
from mgit.model.materialize import ChunkSource, LocalChunks, patchable, plan_file, write_chunks_at
from mgit.progress import Bar
from mgit.store.chunkstore import ChunkStore

PATCH_SHARE = 0.5  # patch when the chunks to write make at most this share of the file
CHUNKED_KINDS = ("safetensors", "chunked")


def _chunk_at(graph: Graph, entry: Entry, rel: str) -> dict[int, tuple[str, int]]:
    """Offset → (chunk id, size) of every chunk of a committed file (a chunk repeated in the
    file, such as the ones of equal norms, at each of its places)."""
    lead, parts = plan_file(graph, entry, rel)
    out, at = {}, len(lead)
    for cid, size, _ in parts:
        out[at] = (cid, size)
        at += size
    return out


def patch_entry(
    graph: Graph,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    entry: Entry,
    dest: Path,
    rel: str,
    was: Entry,
    old: tuple[Path, LocalChunks],
    bar: Bar,
    clean: Callable[[], bool],
) -> bool:
    """Bring the working file at ``dest``, holding ``was`` if ``clean()`` (its chunks where
    ``old`` says), to ``entry`` by writing only the chunks not already at their offsets (a
    chunk the file holds elsewhere is copied from there, re-verified); False (nothing
    written) unless that is at most PATCH_SHARE of the file, every chunk to write is in the
    store (a chunk copied from elsewhere in the file may be one the patch overwrote), the
    file may be patched at all (:func:`~mgit.model.materialize.patchable`, the same
    permission bits) and ``clean()`` says it holds ``was`` (asked last: it may hash the
    whole file)."""
    if entry.kind not in CHUNKED_KINDS or was.kind not in CHUNKED_KINDS:
        return False
    lead, parts = plan_file(graph, entry, rel)
    there = _chunk_at(graph, was, rel)
    items, at = [], len(lead)
    for cid, size, what in parts:
        if there.get(at) != (cid, size):
            items.append((at, cid, size, what))
        at += size
    file_size, changed = at, sum(size for _, _, size, _ in items)
    if changed > PATCH_SHARE * file_size or not all(store.has(cid) for _, cid, _, _ in items):
        return False
    with ChunkSource(store, old) as source:
        if not patchable(dest, source, file_size, lead):
            return False
    try:
        executable = bool(os.lstat(dest).st_mode & stat.S_IXUSR)
    except OSError:
        return False
    if executable != (entry.mode == MODE_EXEC) or not clean():
        return False
    fd = os.open(dest, os.O_WRONLY | os.O_NOFOLLOW)
    try:
        write_chunks_at(store, pool, fd, items, old, bar, dest, crash_point="write")
    finally:
        os.close(fd)
    bar.advance(file_size - changed)  # the bytes left as they were count as done
    return True
