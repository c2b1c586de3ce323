"""Opted in (``[checkout] inPlace = true``): a checkout that changes a small part of a clean
working file writes only that part over it.

Switching between fine-tunes of one model (frozen layers, a LoRA merged into a few
projections, a budgeted merge) changes a few chunks of a multi-GB file. Writing the file
anew costs its whole size in writes even when every unchanged chunk is copied from the old
file; patching it in place writes only the chunks that differ, at their offsets. The price:
while the patch is copied in (and after a kill, until the next command finishes it) the file
is a mix of old and new chunks, which a reader may load. So it is not the default. The
changed chunks are first written, verified, into a sparse temporary file (a corrupt chunk
stops the checkout before the working file changes); the checkout's journal names the file
before the first range is copied, so a patch killed half way is finished by the next command
(it rewrites the file, re-verifying every chunk it copies from it by hash).
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mgit.graph.objects import MODE_EXEC, Graph
from mgit.graph.snapshot import Entry
from mgit.model.manifest import chunk_offsets
from mgit.model.materialize import ChunkSource, LocalChunks, plan_file, write_chunks_at
from mgit.model.placing import Patch, patch_file, patchable
from mgit.progress import Bar
from mgit.store.chunkstore import ChunkStore

PATCH_SHARE = 0.5  # patch when the chunks to write make at most this share of the file
CHUNKED_KINDS = ("safetensors", "chunked")


def _chunk_at(graph: Graph, entry: Entry, rel: str) -> dict[int, tuple[str, int]]:
    """Offset → (chunk id, size) of every chunk of a committed file (a chunk repeated in the
    file, such as the ones of equal norms, at each of its places)."""
    lead, parts = plan_file(graph, entry, rel)
    return {at: (cid, size) for at, (cid, size, _) in zip(_offsets(lead, parts), parts, strict=False)}


def _offsets(lead: bytes, parts: list[tuple[str, int, str]]) -> list[int]:
    """Where each of a file's chunks (mgit.model.materialize.plan_file) lies in it, then its end."""
    return chunk_offsets((size for _, size, _ in parts), len(lead))


def prepare_patch(
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
) -> Patch | None:
    """The patch bringing the working file at ``dest``, holding ``was`` if ``clean()`` (its
    chunks where ``old`` says), to ``entry``: the chunks not already at their offsets (a chunk
    the file holds elsewhere is copied from there, re-verified), written and verified into a
    sparse temporary file. None (nothing written) unless that is at most PATCH_SHARE of the
    file, every chunk to write is in the store, the file may be patched at all
    (:func:`~mgit.model.placing.patchable`, the same permission bits) and ``clean()`` says it
    holds ``was`` (asked last: it may hash the whole file)."""
    if entry.kind not in CHUNKED_KINDS or was.kind not in CHUNKED_KINDS:
        return None
    lead, parts = plan_file(graph, entry, rel)
    there = _chunk_at(graph, was, rel)
    offsets = _offsets(lead, parts)
    items = [(at, *part) for at, part in zip(offsets, parts, strict=False) if there.get(at) != part[:2]]
    file_size, changed = offsets[-1], sum(size for _, _, size, _ in items)
    if changed > PATCH_SHARE * file_size or not all(store.has(cid) for _, cid, _, _ in items):
        return None
    with ChunkSource(store, old) as source:
        if not patchable(dest, source.fd, file_size, lead):
            return None
    try:
        executable = bool(os.lstat(dest).st_mode & stat.S_IXUSR)
    except OSError:
        return None
    if executable != (entry.mode == MODE_EXEC) or not clean():
        return None
    tmp, fd = patch_file(dest, file_size)
    patch = Patch(dest, tmp, fd, [(at, size) for at, _, size, _ in items])
    try:
        write_chunks_at(store, pool, fd, items, old, bar, dest)
    except BaseException:
        patch.discard()
        raise
    bar.advance(file_size - changed)  # the bytes left as they were count as done
    return patch
