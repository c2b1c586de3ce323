"""Files and in-memory tensors → chunks in the store and manifests in the graph.

Every chunk is hashed (BLAKE3), measured (L2, max |x|) and, if the store lacks it,
encoded and written; chunks are processed on every core, in bounded windows.
"""

from __future__ import annotations

import os
import stat as stat_mode
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mgit.errors import BadInputError, MgitError, chunks_of
from mgit.graph.names import CHUNKED_ENTRY
from mgit.graph.objects import MODE_EXEC, MODE_FILE, Graph
from mgit.graph.snapshot import Entry
from mgit.model.chunking import DEFAULT_CHUNK_BYTES, ShrankError, cdc_chunks, chunk_ranges, chunk_size_for
from mgit.model.dtypes import DType
from mgit.model.filetree import put_safetensors_tree
from mgit.model.manifest import ChunkRef, FileManifest, TensorManifest
from mgit.model.opaque import store_file
from mgit.model.safetensors_file import SafetensorsLayout, read_layout
from mgit.model.stats import chunk_stats, stats_against
from mgit.parallel import WORKERS, ordered_map
from mgit.progress import Bar
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import RawBytes, chunk_id

LARGE_FILE_BYTES = DEFAULT_CHUNK_BYTES  # non-tensor files above this are chunked, not blobs
# Chunks in flight: only the ones running (one per worker) hold their bytes; the queued ones
# hold nothing but the read-ahead they asked the kernel for, so a longer window costs no memory.
WINDOW = 4 * WORKERS
# Chunks whose reads are asked for ahead of the one submitted: a hint to the kernel (page cache, no
# memory of ours). A window's worth was too little on a cold disk, where each of a merge's scattered
# reads waits on its latency: 32 chunks (128 MiB of a file) made a budgeted K = 16 merge of bench_scale's
# 2.2 GB model ~7% faster and its dense add ~15% (by hand, cold page cache, 2 cores).
READ_AHEAD = max(WINDOW, 32)
ReadAt = Callable[[int, int], bytes | memoryview]  # (offset, size) → bytes


@dataclass
class IngestStats:
    logical_bytes: int = 0
    stored_bytes: int = 0  # bytes newly written to the chunk store
    chunks: int = 0
    new_chunks: int = 0
    files: list[str] = field(default_factory=list)


def classify(rel: str, size: int) -> str:
    if rel.endswith(".safetensors"):
        return "safetensors"
    return "chunked" if size > LARGE_FILE_BYTES else "blob"


class FileReader:
    """Reads ranges of an open file relative to ``base`` (a ReadAt), from any thread."""

    def __init__(self, fd: int, base: int):
        self.fd, self.base = fd, base

    def __call__(self, offset: int, size: int) -> bytes:
        data = os.pread(self.fd, size, self.base + offset)
        if len(data) != size:
            raise ShrankError(f"file shrank while being read (wanted {size} bytes at {self.base + offset})")
        return data

    def will_need(self, offset: int, size: int) -> None:
        """Ask the kernel to start reading a range that will be read soon (read-ahead): a
        cold file's disk reads then overlap the hashing and compression of earlier chunks
        instead of stalling the worker that reads it."""
        if size and hasattr(os, "posix_fadvise"):
            os.posix_fadvise(self.fd, self.base + offset, size, os.POSIX_FADV_WILLNEED)


def _file_reader(fd: int, base: int) -> ReadAt:
    return FileReader(fd, base)


# file path → the tensors (by name) of the same model in the base revision
ParentLookup = Callable[[str], dict[str, TensorManifest]]
# file path → the large non-tensor file at that path in the base revision, if there is one
ParentFileLookup = Callable[[str], FileManifest | None]
# one relative statistic: [chunk id, parent chunk id, ‖chunk − parent chunk‖₂]
DeltaStat = list[str | float | None]
# (chunk index, parent chunk id) → that parent chunk's raw bytes if the caller holds them, else None
ParentBytes = Callable[[int, str], bytes | memoryview | None]
# chunk index → the chunk already known to be the result there (a merge carrying the base's), else None
Carried = Callable[[int], ChunkRef | None]


@dataclass(frozen=True)
class _Piece:
    """One tensor's chunks to store: where they are read and how they delta."""

    name: str
    read: ReadAt
    nbytes: int
    chunk_size: int
    dtype: DType | None
    parent: TensorManifest | None = None
    parent_bytes: ParentBytes | None = None
    carried: Carried | None = None


@dataclass(frozen=True)
class TensorJob:
    """One tensor for :meth:`Ingestor.tensors`: its result dtype and shape, where its chunks are
    read (a ``read`` with a ``will_need(offset, size)`` method is told ahead of time which ranges
    it will be asked for), the parent chunks its caller holds and the chunks known already."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    nbytes: int
    read: ReadAt
    parent_bytes: ParentBytes | None = None
    carried: Carried | None = None


class Ingestor:
    """Turns files (or tensors) into graph entries, storing their chunks.

    With ``parents``, a tensor whose name, dtype and row shape match one of the base
    revision's is stored chunk by chunk as a delta against that tensor's chunk
    (where that is smaller), and the L2 norm of each changed chunk's difference to its
    equal-sized parent chunk is recorded (``file_stats``) for the commit's stats blob.
    With ``parent_files``, a large non-tensor file's changed chunks are stored as deltas
    against the chunks of the base revision's file at the same path (model/opaque.py).
    """

    def __init__(
        self,
        graph: Graph,
        store: ChunkStore,
        pool: ThreadPoolExecutor,
        bar: Bar | None = None,
        parents: ParentLookup | None = None,
        parent_files: ParentFileLookup | None = None,
    ):
        self.graph, self.store, self.pool = graph, store, pool
        self.bar = bar or Bar()
        self.stats = IngestStats()
        self.parents = parents or (lambda rel: {})
        self.parent_files = parent_files or (lambda rel: None)
        self._parent_tensors: dict[str, TensorManifest] = {}
        self.file_stats: list[DeltaStat] = []

    def _chunk(self, piece: _Piece, i: int, start: int, end: int) -> tuple[ChunkRef, int, DeltaStat | None]:
        """Read, hash, measure and store chunk ``i`` of ``piece`` (on a pool thread)."""
        dtype, parent = piece.dtype, piece.parent
        group = dtype.group if dtype else 1
        known = piece.carried(i) if piece.carried is not None else None
        if known is not None:  # stored already, its statistics with it: nothing to read or hash
            assert known.size == end - start, "a carried chunk covers the range it replaces"
            return known, 0, None
        raw = piece.read(start, end - start)
        cid = chunk_id(raw)
        base = parent.chunks[i] if parent is not None and i < len(parent.chunks) else None
        if base is not None and base.id == cid and base.size == end - start:
            # the parent's chunk itself (a frozen layer): its statistics are in the parent's
            # manifest already, computed from these very bytes, so the manifest stays the same
            return ChunkRef(cid, base.size, base.l2, base.max_abs), self.store.put(raw, group, cid).written, None
        if base is None or base.id == cid or not self.store.has(base.id):
            l2, max_abs = chunk_stats(raw, dtype) if dtype is not None else (None, None)
            return ChunkRef(cid, end - start, l2, max_abs), self.store.put(raw, group, cid).written, None
        held = piece.parent_bytes(i, base.id) if piece.parent_bytes is not None else None
        base_raw: RawBytes
        if held is None:
            with chunks_of(f"tensor {piece.name!r}"):
                base_raw = self.store.get(base.id)
        else:
            base_raw = held
        pair = base_raw if base.size == end - start else None  # ‖Δ‖ pairs equal-sized chunks only
        l2, max_abs, delta = stats_against(raw, pair, dtype) if dtype is not None else (None, None, None)
        stat = [cid, base.id, delta] if pair is not None else None  # a grown last chunk still deltas
        written = self.store.put(raw, group, cid, base=(base.id, base_raw)).written
        return ChunkRef(cid, end - start, l2, max_abs), written, stat

    def _store(self, pieces: list[_Piece]) -> list[tuple[ChunkRef, ...]]:
        """Every chunk of ``pieces`` through one bounded window, in order: the workers go from
        one tensor's last chunk straight to the next tensor's first instead of waiting for the
        window to drain at every tensor (most tensors of a model are one or two chunks)."""
        ranges = [chunk_ranges(p.nbytes, p.chunk_size) for p in pieces]
        items = [(p, i, start, end) for p, rs in zip(pieces, ranges, strict=True) for i, (start, end) in enumerate(rs)]

        def advise(k: int) -> None:
            if k < len(items):
                p, i, start, end = items[k]
                will_need = getattr(p.read, "will_need", None)  # a file, a merge's inputs
                if will_need is not None and (p.carried is None or p.carried(i) is None):
                    will_need(start, end - start)

        def ahead() -> Iterator[tuple[_Piece, int, int, int]]:
            """The items, each submitted once the one READ_AHEAD places later is asked for: that
            many chunks' reads are under way beyond the chunks being worked on."""
            for k in range(min(READ_AHEAD, len(items))):
                advise(k)
            for k, item in enumerate(items):
                advise(k + READ_AHEAD)
                yield item

        refs = []
        for ref, written, stat in ordered_map(self.pool, lambda item: self._chunk(*item), ahead(), window=WINDOW):
            refs.append(ref)
            if stat is not None:
                self.file_stats.append(stat)
            self._count(ref, written)
        out, at = [], 0
        for rs in ranges:
            out.append(tuple(refs[at : at + len(rs)]))
            at += len(rs)
        return out

    def _count(self, ref: ChunkRef, written: int) -> None:
        """One chunk stored (``written`` bytes newly written, 0 when it was there already)."""
        self.stats.chunks += 1
        self.stats.new_chunks += written > 0
        self.stats.stored_bytes += written
        self.stats.logical_bytes += ref.size
        self.bar.advance(ref.size)

    def _piece(
        self,
        name: str,
        dtype: DType,
        shape: tuple[int, ...],
        nbytes: int,
        read: ReadAt,
        parent_bytes: ParentBytes | None = None,
        carried: Carried | None = None,
    ) -> _Piece:
        """One tensor's chunks to store, with the parent tensor its chunks delta against."""
        size = chunk_size_for(shape, dtype.bits)
        parent = self._parent_tensors.get(name)
        # Same dtype, row shape and chunk size: chunk i covers the same rows in both, also
        # when rows were appended (vocabulary extension), so chunk i is a good delta base.
        if parent is not None and (parent.dtype, parent.shape[1:], parent.chunk_size) != (dtype.name, shape[1:], size):
            parent = None
        return _Piece(name, read, nbytes, size, dtype, parent, parent_bytes, carried)

    def tensor(
        self,
        name: str,
        dtype: DType,
        shape: tuple[int, ...],
        nbytes: int,
        read: ReadAt,
        parent_bytes: ParentBytes | None = None,
        carried: Carried | None = None,
    ) -> str:
        """Store one tensor's chunks and manifest; returns the manifest blob id.

        ``read`` is called on the pool's threads, one chunk's range at a time. A caller
        holding the parent tensor's chunks decoded (a merge holds the base) passes
        ``parent_bytes`` so they are not read from the store again; one that already knows
        the stored chunk at an index (a merge where no expert changed the base) passes
        ``carried``, and ``read`` is not called there."""
        return self.tensors([TensorJob(name, dtype, shape, nbytes, read, parent_bytes, carried)])[0]

    def tensors(self, jobs: Sequence[TensorJob]) -> list[str]:
        """Store several tensors' chunks through one window, then their manifests; returns the
        manifest blob ids in order. The workers go from one tensor's last chunk straight to the
        next's first instead of waiting at every tensor for the window to drain."""
        pieces = [self._piece(j.name, j.dtype, j.shape, j.nbytes, j.read, j.parent_bytes, j.carried) for j in jobs]
        chunks = self._store(pieces)
        return [
            self.graph.put_blob(TensorManifest(j.dtype.name, j.shape, p.chunk_size, refs).to_bytes())
            for j, p, refs in zip(jobs, pieces, chunks, strict=True)
        ]

    def begin_file(self, rel: str) -> None:
        """Start a new file: look up its parent tensors, reset its statistics."""
        self._parent_tensors = self.parents(rel) if rel.endswith(".safetensors") else {}
        self.file_stats = []

    def safetensors_tree(self, header: bytes, manifest_ids: dict[str, str]) -> str:
        return put_safetensors_tree(self.graph, header, manifest_ids)

    def safetensors_file(self, path: Path, rel: str, layout: SafetensorsLayout | None = None) -> Entry:
        layout = layout or read_layout(path, rel)
        with open(path, "rb") as f:
            pieces = [
                self._piece(t.name, t.dtype, t.shape, t.nbytes, _file_reader(f.fileno(), layout.data_start + t.begin))
                for t in layout.tensors
            ]
            chunks = self._store(pieces)  # all tensors of the file in one window
        ids = {}
        for t, piece, refs in zip(layout.tensors, pieces, chunks, strict=True):
            manifest = TensorManifest(t.dtype.name, t.shape, piece.chunk_size, refs)
            ids[t.name] = self.graph.put_blob(manifest.to_bytes())
        self.bar.advance(layout.data_start)
        return Entry("safetensors", self.safetensors_tree(layout.header, ids))

    def chunked_file(self, path: Path, rel: str) -> Entry:
        """A large non-tensor file, cut where its content says, its changed chunks stored as
        deltas against the chunks of its version in the base revision (``parent_files``)."""
        refs = []
        with open(path, "rb") as f, chunks_of(rel):
            size = os.fstat(f.fileno()).st_size
            for ref, written in store_file(self.store, self.pool, f.fileno(), size, self.parent_files(rel)):
                refs.append(ref)
                self._count(ref, written)
        manifest = FileManifest(size, tuple(refs))
        blob = self.graph.put_blob(manifest.to_bytes())
        return Entry("chunked", self.graph.put_tree([(CHUNKED_ENTRY, MODE_FILE, blob)]))

    def blob_file(self, path: Path) -> Entry:
        data = path.read_bytes()
        self.stats.logical_bytes += len(data)
        self.bar.advance(len(data))
        mode = MODE_EXEC if os.stat(path).st_mode & 0o111 else MODE_FILE
        return Entry("blob", self.graph.put_blob(data), mode)

    def file(self, path: Path, rel: str) -> Entry:
        st = os.stat(path)
        if not stat_mode.S_ISREG(st.st_mode):  # opening a FIFO would wait for a writer forever
            raise BadInputError(f"cannot read {rel}: not a regular file (a FIFO, socket or device)")
        kind = classify(rel, st.st_size)
        self.stats.files.append(rel)
        self.begin_file(rel)
        try:
            if kind == "safetensors":
                return self.safetensors_file(path, rel)
            return self.chunked_file(path, rel) if kind == "chunked" else self.blob_file(path)
        except ShrankError:
            raise changed_while_read(rel) from None


def changed_while_read(rel: str) -> BadInputError:
    """The error of ``add`` reading a file that changed meanwhile (read as a mix of two versions)."""
    return BadInputError(
        f"{rel} changed while mgit was reading it; nothing was staged. Run `mgit add` again once it is written"
    )


def scan_tensor_chunks(
    path: Path, rel: str, pool: ThreadPoolExecutor, chunk_sizes: dict[str, int] | None = None
) -> tuple[SafetensorsLayout, dict[str, tuple[str, ...]]]:
    """Chunk ids of every tensor of a working file, stored nowhere (for status).

    ``chunk_sizes`` gives the chunk size a stored manifest recorded for a tensor name, so
    the comparison holds even if the chunking rule of this mgit differs from the writer's.
    """
    layout = read_layout(path, rel)
    chunk_sizes = chunk_sizes or {}
    out = {}
    with open(path, "rb") as f:
        for t in layout.tensors:
            read = _file_reader(f.fileno(), layout.data_start + t.begin)
            size = chunk_sizes.get(t.name) or chunk_size_for(t.shape, t.dtype.bits)
            ranges = chunk_ranges(t.nbytes, size)

            def range_id(r: tuple[int, int], read: ReadAt = read) -> str:
                return chunk_id(read(r[0], r[1] - r[0]))

            out[t.name] = tuple(ordered_map(pool, range_id, ranges))
    return layout, out


def recover_chunks(
    root: Path, paths: Iterable[str], wanted: set[str], store: ChunkStore, pool: ThreadPoolExecutor
) -> set[str]:
    """Store again every chunk of ``wanted`` that a working file still holds (a repair after
    a damaged chunk was dropped); returns the ids recovered. Files are cut as ``add`` cuts them
    (a large non-tensor file also at the fixed offsets of mgit before format 4)."""
    found: set[str] = set()
    for rel in paths:
        path = root / rel
        try:
            kind = classify(rel, os.stat(path).st_size)
            if kind == "blob":
                continue
            with open(path, "rb") as f:
                if kind == "safetensors":
                    layout = read_layout(path, rel)
                    pieces = [
                        (
                            layout.data_start + t.begin,
                            chunk_ranges(t.nbytes, chunk_size_for(t.shape, t.dtype.bits)),
                            t.dtype.group,
                        )
                        for t in layout.tensors
                    ]
                else:
                    size = os.fstat(f.fileno()).st_size
                    cuts = [(at, at + len(raw)) for at, raw in cdc_chunks(f.fileno(), size)]
                    pieces = [(0, cuts, 1), (0, chunk_ranges(size, DEFAULT_CHUNK_BYTES), 1)]
                for base, ranges, group in pieces:
                    read = _file_reader(f.fileno(), base)

                    def one(r: tuple[int, int], read: ReadAt = read, group: int = group) -> str | None:
                        raw = read(r[0], r[1] - r[0])
                        cid = chunk_id(raw)
                        if cid in wanted and cid not in found and not store.has(cid, refresh=False):
                            store.put(raw, group, cid)
                            return cid
                        return None

                    found.update(c for c in ordered_map(pool, one, ranges) if c)
        except (OSError, MgitError):
            continue  # an unreadable or invalid file: nothing to recover from it
    return found
