"""Opted in (``[checkout] inPlace = true``): a checkout that changes a small part of a clean working
file writes only the changed chunks over it, instead of the whole file anew.

Not the default: while it runs (or after a kill, until the next command finishes it) a reader
may see a mix of old and new chunks. Verified chunks are staged first and the journal names the
file. Details: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mgit.graph.objects import MODE_EXEC, Graph
from mgit.graph.snapshot import Entry
from mgit.model.materialize import (
    ChunkSource,
    LocalChunks,
    committed_layout,
    end_of,
    laid_out,
    naming_owners,
    write_chunks_at,
)
from mgit.model.placing import Patch, patch_file, patchable, pwrite_all
from mgit.progress import Bar
from mgit.store.chunkstore import ChunkStore

PATCH_SHARE = 0.5  # patch when the chunks to write make at most this share of the file
CHUNKED_KINDS = ("safetensors", "chunked")


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
    file, the file may be patched at all (:func:`~mgit.model.placing.patchable`, the same
    permission bits) and ``clean()`` says it holds ``was`` (asked last: it may hash the whole
    file)."""
    if entry.kind not in CHUNKED_KINDS or was.kind not in CHUNKED_KINDS:
        return None
    lead, placed = laid_out(graph, entry, rel)
    there = {at: (cid, size) for at, cid, size in laid_out(graph, was, rel)[1]}
    items = [c for c in placed if there.get(c[0]) != (c[1], c[2])]
    file_size, changed = end_of(lead, placed), sum(size for _, _, size in items)
    if changed > PATCH_SHARE * file_size:
        return None
    with ChunkSource(store, old) as source:
        if not patchable(dest, source.fd, file_size, lead):
            return None
    try:
        seen = os.lstat(dest)  # before clean(): any write after it shows in the status
    except OSError:
        return None
    if bool(seen.st_mode & stat.S_IXUSR) != (entry.mode == MODE_EXEC) or not clean():
        return None
    moved = {at for at, _, _ in items}
    rest = [c for c in placed if c[0] not in moved]
    layout = committed_layout(graph, entry, rel)

    def complete(fd: int) -> None:
        """The rest of the new file, for a working file that changed since it was found clean."""
        pwrite_all(fd, lead, 0, dest)
        with naming_owners(rel, layout):
            write_chunks_at(store, pool, fd, rest, old, Bar(), dest, missing_ok=True)
        os.fchmod(fd, 0o755 if entry.mode == MODE_EXEC else 0o644)

    tmp, fd = patch_file(dest, file_size)
    patch = Patch(dest, tmp, fd, [(at, size) for at, _, size in items], seen, complete)
    try:
        with naming_owners(rel, layout):
            write_chunks_at(store, pool, fd, items, old, bar, dest)
    except BaseException:
        patch.discard()
        raise
    bar.advance(file_size - changed)  # the bytes left as they were count as done
    return patch
