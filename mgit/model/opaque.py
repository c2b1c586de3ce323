"""Large non-tensor files → content-defined chunks, stored as patch deltas where that pays.

Unchanged bytes give the parent's chunks again; a chunk holding an edit is tried as a patch delta
against the parent chunk it replaces, found from its unchanged neighbours. Hashing and storing run
on the pool, choosing bases in file order. Details: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import bisect
import os
from collections import deque
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mgit.model.chunking import cdc_chunks
from mgit.model.manifest import ChunkRef, FileManifest
from mgit.parallel import WORKERS, ordered_map
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import chunk_id

NEAR = 2  # a changed chunk is tried as a delta when an unchanged one is at most this many chunks away
WINDOW = 2 * WORKERS  # chunks in flight in each of the two passes (each holds its bytes)


@dataclass
class _Cut:
    """One chunk of the new file: its place, bytes and id, and the parent chunk it deltas against."""

    index: int
    start: int
    raw: bytes
    cid: str = ""
    base: str | None = None

    @property
    def end(self) -> int:
        return self.start + len(self.raw)


class _Parent:
    """The parent version's chunks by offset, and where each of its chunk ids first lies."""

    def __init__(self, manifest: FileManifest):
        self.fixed = manifest.chunk_size is not None
        self.starts = manifest.offsets()
        self.size = self.starts.pop()
        self.ids = [c.id for c in manifest.chunks]
        self.offset: dict[str, int] = {}
        for cid, at in zip(self.ids, self.starts, strict=False):
            self.offset.setdefault(cid, at)

    def covering(self, start: int, end: int) -> str | None:
        """The id of the chunk that holds most of the bytes ``[start, end)`` (the first of equals)."""
        start, end = max(start, 0), min(end, self.size)
        if start >= end:
            return None
        first = bisect.bisect_right(self.starts, start) - 1
        best, most = None, 0
        for k in range(first, len(self.starts)):
            lo = self.starts[k]
            if lo >= end:
                break
            hi = self.starts[k + 1] if k + 1 < len(self.starts) else self.size
            if min(hi, end) - max(lo, start) > most:
                best, most = self.ids[k], min(hi, end) - max(lo, start)
        return best


def _choose_bases(cuts: Iterable[_Cut], parent: _Parent) -> Iterator[_Cut]:
    """``cuts`` (hashed, in file order) with their delta bases set, each once the NEAR chunks
    after it are hashed too."""
    done: deque[_Cut] = deque(maxlen=NEAR)
    ahead: deque[_Cut] = deque()

    def decide(cut: _Cut) -> None:
        if cut.cid in parent.offset:
            return  # the parent's own chunk: stored already
        near = [c for c in (*reversed(done), *ahead) if c.cid in parent.offset]
        anchor = min(near, key=lambda c: abs(c.index - cut.index), default=None)  # the earlier of equals
        if anchor is not None:
            shift = anchor.start - parent.offset[anchor.cid]
        elif parent.fixed or cut.index < NEAR:
            shift = 0
        else:
            return
        cut.base = parent.covering(cut.start - shift, cut.end - shift)

    def release() -> _Cut:
        cut = ahead.popleft()
        decide(cut)
        done.append(cut)
        return cut

    for cut in cuts:
        ahead.append(cut)
        if len(ahead) > NEAR:
            yield release()
    while ahead:
        yield release()


def store_file(
    store: ChunkStore, pool: ThreadPoolExecutor, fd: int, size: int, parent: FileManifest | None
) -> Iterator[tuple[ChunkRef, int]]:
    """Store the first ``size`` bytes of the open file ``fd`` as content-defined chunks, each a
    patch delta against a chunk of ``parent`` (the file's previous version) where that is smaller;
    yields (chunk, stored bytes newly written) in file order."""
    cuts = (_Cut(i, start, raw) for i, (start, raw) in enumerate(cdc_chunks(fd, size)))

    def hashed(cut: _Cut) -> _Cut:
        cut.cid = chunk_id(cut.raw)
        return cut

    def stored(cut: _Cut) -> tuple[ChunkRef, int]:
        ref = ChunkRef(cut.cid, len(cut.raw))
        if cut.base is None or store.has(cut.cid, refresh=False) or not store.has(cut.base):
            return ref, store.put(cut.raw, 1, cut.cid).written
        base = (cut.base, store.get(cut.base))
        return ref, store.put(cut.raw, 1, cut.cid, base=base, opaque=True).written

    ready: Iterable[_Cut] = ordered_map(pool, hashed, cuts, window=WINDOW)
    if parent is not None:
        ready = _choose_bases(ready, _Parent(parent))
    yield from ordered_map(pool, stored, ready, window=WINDOW)


def scan_file(path: os.PathLike[str] | str, pool: ThreadPoolExecutor) -> tuple[ChunkRef, ...]:
    """The chunks ``add`` would cut the file at ``path`` into, hashed, stored nowhere."""
    with open(path, "rb") as f:
        cuts = cdc_chunks(f.fileno(), os.fstat(f.fileno()).st_size)
        return tuple(ordered_map(pool, lambda cut: ChunkRef(chunk_id(cut[1]), len(cut[1])), cuts, window=WINDOW))


def holds(path: os.PathLike[str] | str, pool: ThreadPoolExecutor, manifest: FileManifest) -> bool:
    """Whether the file at ``path`` holds exactly the chunks of ``manifest``, each at its offset
    (hashed, stored nowhere): whether a working file still holds a committed file needs no
    chunking rule."""
    with open(path, "rb") as f:
        fd = f.fileno()
        if os.fstat(fd).st_size != manifest.size:
            return False

        def one(item: tuple[ChunkRef, int]) -> str:
            c, at = item
            return chunk_id(os.pread(fd, c.size, at))

        found = ordered_map(pool, one, zip(manifest.chunks, manifest.offsets(), strict=False), window=WINDOW)
        return list(found) == [c.id for c in manifest.chunks]
