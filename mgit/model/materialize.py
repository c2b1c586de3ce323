"""Graph entries → files on disk, byte-exact, prepared out of sight (mgit.model.placing).

Each file is written to a temporary name and only made visible once complete, by a rename
(or, opted in, a patch of the changed ranges: model/patching.py), so a checkout that meets a
corrupt chunk or a kill never leaves a half-written model. Chunks the old local file already
holds are copied from it in the kernel (``copy_file_range``) and checked by hash where they
land, instead of being read and decoded from the store. A merge writes its merged chunks into
a :class:`StagedFile` while it computes them; the checkout ending it completes that file the
same way.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

from mgit.errors import DamagedChunkError
from mgit.graph.objects import MODE_EXEC, Graph
from mgit.graph.snapshot import Entry
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.model.manifest import chunk_offsets
from mgit.model.placing import SPACE_ERRORS, Patch, Replacement, copy_range, patchable, pwrite_all, temporary
from mgit.model.safetensors_file import SafetensorsLayout, parse_header
from mgit.parallel import WORKERS, ordered_map
from mgit.progress import Bar
from mgit.store import codec
from mgit.store.chunkstore import MAX_DELTA_DEPTH, ChunkStore
from mgit.store.record import RawBytes, chunk_id

# Chunks in flight while writing a file. A chunk's bytes live only while its worker decodes and
# writes it; the rest of the window is results (byte counts) waiting for an earlier, slower
# chunk, so a long window costs no memory and keeps every worker busy past a slow chunk.
WINDOW = 8 * WORKERS

# chunk id → (offset, size) in a local file known to be clean
LocalChunks = dict[str, tuple[int, int]]
# a chunk where a file holds it: (file offset, chunk id, size)
Placed = tuple[int, str, int]


def entry_size(graph: Graph, entry: Entry) -> int:
    if entry.kind == "safetensors":
        return load_safetensors(graph, entry.oid).file_size
    if entry.kind == "chunked":
        return load_chunked(graph, entry.oid).size
    return len(graph.blob(entry.oid))


def laid_out(graph: Graph, entry: Entry, rel: str) -> tuple[bytes, list[Placed]]:
    """The leading bytes of a committed safetensors or chunked file and, after them, each of
    its chunks in file order where the file holds it (a chunk repeated in the file, such as
    the ones of equal norms, at each of its places)."""
    if entry.kind == "chunked":
        lead, parts = b"", [(c.id, c.size) for c in load_chunked(graph, entry.oid).chunks]
    else:
        stored = load_safetensors(graph, entry.oid, rel)
        lead, parts = stored.layout.header, []
        for t in stored.layout.tensors:
            parts += [(c.id, c.size) for c in stored.manifests[t.name].chunks]
    offsets = chunk_offsets((size for _, size in parts), len(lead))
    return lead, [(at, cid, size) for at, (cid, size) in zip(offsets, parts, strict=False)]


def owner_at(layout: SafetensorsLayout | None, rel: str, at: int) -> str:
    """What the byte at offset ``at`` of the file at ``rel`` is of, as errors name it: the tensor
    there (``layout``: the file's header), else the file itself."""
    if layout is not None:
        for t in layout.tensors:
            if layout.data_start + t.begin <= at < layout.data_start + t.end:
                return f"tensor {t.name!r} in {rel}"
    return rel


@contextmanager
def naming_owners(rel: str, layout: Callable[[], SafetensorsLayout | None]) -> Iterator[None]:
    """Inside, a damaged chunk written into the file at ``rel`` is named as of the tensor at its
    offset (``layout()``: the file's header, asked only then; None: a chunked file, named itself).
    The writers know only offsets and chunk ids; this is the one place the file's layout names them."""
    try:
        yield
    except DamagedChunkError as exc:
        if exc.at is not None:
            exc.name_owner(owner_at(layout(), rel, exc.at))
        raise


def committed_layout(graph: Graph, entry: Entry, rel: str) -> Callable[[], SafetensorsLayout | None]:
    """The header of a committed file, for :func:`naming_owners` (None for a chunked file)."""
    return lambda: load_safetensors(graph, entry.oid, rel).layout if entry.kind == "safetensors" else None


def end_of(lead: bytes, placed: list[Placed]) -> int:
    """The size of the file ``laid_out`` describes."""
    return placed[-1][0] + placed[-1][2] if placed else len(lead)


def local_chunks(graph: Graph, entry: Entry) -> LocalChunks:
    """Where each chunk of a committed file lies inside that file (its first place)."""
    out: LocalChunks = {}
    if entry.kind in ("safetensors", "chunked"):
        for at, cid, size in laid_out(graph, entry, "")[1]:
            out.setdefault(cid, (at, size))
    return out


def store_reads(graph: Graph, entry: Entry, rel: str, local: LocalChunks | None = None) -> list[str]:
    """Chunk ids that writing ``entry`` reads from the store, once per read (a chunk used
    twice is read twice), leaving out those a clean local file supplies (``local``): what
    :func:`prepare_entry` will do, priced before it runs."""
    if entry.kind == "blob":
        return []
    local = local or {}
    return [cid for _, cid, _ in laid_out(graph, entry, rel)[1] if cid not in local]


def write_chunks_at(
    store: ChunkStore,
    pool: ThreadPoolExecutor | None,
    fd: int,
    items: list[Placed],
    reuse: tuple[Path, LocalChunks] | None,
    bar: Bar,
    dest: Path,
    missing_ok: bool = False,
) -> None:
    """Put each chunk at its offset of the file open as ``fd`` (read and write) from the
    workers: the copies, decodes and page-cache writes then run on every core instead of one.
    Every chunk is checked against its id. ``missing_ok``: a local file that is gone is no
    error (every chunk comes from the store)."""
    with ChunkSource(store, reuse, missing_ok) as source:

        def one(i: int) -> int:
            at, cid, size = items[i]
            return source.put(fd, at, cid, size, dest)

        ahead = _ReadAhead(store, source.fd, source.local)

        def submitted() -> Iterator[int]:
            """Chunk indexes, each submitted once the one WINDOW places later is asked for."""
            for i in range(min(WINDOW, len(items))):
                ahead.advise(*items[i][1:3])
            for i in range(len(items)):
                if i + WINDOW < len(items):
                    ahead.advise(*items[i + WINDOW][1:3])
                yield i

        try:
            for n in ordered_map(pool, one, submitted(), window=WINDOW) if pool is not None else map(one, submitted()):
                bar.advance(n)
        finally:
            ahead.close()


class ChunkSource:
    """Chunks by id for writing a file: copied from a local file that holds them (checked by
    hash where they land: the local file may have changed since), else read and decoded from
    the store (which verifies them)."""

    def __init__(self, store: ChunkStore, reuse: tuple[Path, LocalChunks] | None, missing_ok: bool = True):
        self.store, self.reuse = store, reuse
        self.path = reuse[0] if reuse else None
        self.local = reuse[1] if reuse else {}
        self.fd: int | None = None
        if reuse is not None:
            try:
                self.fd = os.open(reuse[0], os.O_RDONLY)
            except OSError:
                if not missing_ok:
                    raise
                self.local = {}

    def put(self, fd: int, at: int, cid: str, size: int, dest: Path) -> int:
        """Write chunk ``cid`` at offset ``at`` of the file open as ``fd`` (read and write);
        returns its size. From the local file: copied in the kernel, then read back and
        hashed; a copy that does not check out, or that fails for any reason but a full disk
        (the local file unreadable, a file system refusing the copy), is written again from the
        store. A damaged chunk's error says where it goes (``at``: see :func:`naming_owners`)."""
        if self.fd is not None and cid in self.local:
            try:
                copied = copy_range(self.fd, fd, self.local[cid][0], at, size, dest, self.path)
            except OSError as exc:
                if exc.errno in SPACE_ERRORS:
                    raise
                copied = -1
            if copied == size:
                landed = codec.thread_buffer("landed", size).data[:size]
                if os.preadv(fd, [landed], at) == size and chunk_id(landed) == cid:
                    return size
        try:
            data = self.store.get(cid)
        except DamagedChunkError as exc:
            exc.at = at
            raise
        if len(data) != size:  # the next chunk's offset comes from ``size``: a lie would overlap them
            raise DamagedChunkError(cid, f"holds {len(data)} bytes; its manifest says {size}; run `mgit fsck`", at=at)
        pwrite_all(fd, data, at, dest)
        return len(data)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> ChunkSource:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _ReadAhead:
    """Asks the kernel to start reading what a chunk's write will read, a window ahead: its
    range in the clean local file, or its record in a pack and those of its delta bases. A cold
    pack's disk reads then overlap the decoding of earlier chunks instead of stalling the
    worker in a page fault. Only a hint: whatever fails here is left to the read itself."""

    def __init__(self, store: ChunkStore, local_fd: int | None, local: LocalChunks):
        self.store, self.local_fd, self.local = store, local_fd, local
        self.fds: dict[Path, int] = {}

    def advise(self, cid: str, size: int) -> None:
        if not hasattr(os, "posix_fadvise"):
            return
        try:
            if self.local_fd is not None and cid in self.local:
                os.posix_fadvise(self.local_fd, self.local[cid][0], size, os.POSIX_FADV_WILLNEED)
                return
            loc, links = self.store.location(cid), 0
            while loc is not None and links <= MAX_DELTA_DEPTH:
                fd = self.fds.get(loc.pack)
                if fd is None:
                    fd = self.fds[loc.pack] = os.open(loc.pack, os.O_RDONLY)
                os.posix_fadvise(fd, loc.offset, loc.length, os.POSIX_FADV_WILLNEED)
                loc, links = (self.store.location(loc.base) if loc.base else None), links + 1
        except OSError:
            pass

    def close(self) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()


class StagedFile:
    """A safetensors file written while its tensors are being produced: a merge writes each
    merged chunk here as it stores it, so the checkout that follows completes it with the
    carried chunks and renames it into place instead of decoding every chunk again, or, when
    the merge changed at most half of the working file and the user opted in (``in_place``),
    copies just the merged and missing chunks over it. It lives in a staging directory of the
    repository (same file system) until installed; a killed merge leaves it there, and the next
    merge or gc clears that directory."""

    def __init__(
        self,
        dest: Path,
        rel: str,
        staging: Path,
        header: bytes,
        data_size: int,
        source: ChunkSource | None = None,
        in_place: bool = False,
    ):
        self.dest, self.rel = dest, rel  # rel: its path in the repository, as errors name it
        self.source = source  # where carried chunks' bytes come from: the working file at ``dest``, as checked out
        self.header = header
        self.in_place = in_place
        self.carried: list[Placed] = []  # the chunks still to write
        self.merged: list[tuple[int, int]] = []  # (file offset, size) of the bytes written here
        self.layout = layout = parse_header(header, len(header) + data_size, str(dest))
        self.file_size = layout.file_size
        self.offsets = {t.name: layout.data_start + t.begin for t in layout.tensors}
        staging.mkdir(parents=True, exist_ok=True)
        self.tmp = staging / f"{uuid.uuid4().hex[:12]}-{dest.name}"
        self.fd = os.open(self.tmp, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, layout.file_size)
        self._pwrite(header, 0)
        self.entry_oid: str | None = None  # set once every tensor is written and the entry is known

    def _pwrite(self, data: RawBytes, offset: int) -> None:
        pwrite_all(self.fd, data, offset, self.tmp)

    def write(self, tensor: str, offset: int, data: bytes | memoryview) -> None:
        """Bytes of ``tensor`` at ``offset`` within it (from any thread)."""
        at = self.offsets[tensor] + offset
        self._pwrite(data, at)
        self.merged.append((at, len(data)))  # list.append is atomic: safe from the pool's threads

    def carry(self, tensor: str, offset: int, cid: str, size: int) -> None:
        """A chunk of ``tensor`` at ``offset`` that is already stored (a merge carried the base's):
        its bytes are written when the file is installed (a file that is not, because the merge
        left it as the working tree holds it, costs nothing more)."""
        self.carried.append((self.offsets[tensor] + offset, cid, size))

    @property
    def to_fill(self) -> int:
        """Bytes still to write into the staged file to complete it."""
        return sum(size for _, _, size in self.carried)

    def _fill(self, fd: int, todo: list[Placed], pool: ThreadPoolExecutor | None) -> None:
        """Put the chunks ``todo`` into the staged file open as ``fd`` (copied from the working
        file where it holds them, checked by hash, else decoded), verified."""
        if not todo:
            return
        if self.source is None:
            raise AssertionError("a staged file with carried chunks needs a chunk source")
        with naming_owners(self.rel, lambda: self.layout):
            write_chunks_at(self.source.store, pool, fd, todo, self.source.reuse, Bar(), self.tmp, missing_ok=True)

    def prepare(self, pool: ThreadPoolExecutor | None, clean: Callable[[], bool]) -> Replacement | Patch:
        """Complete the merged file out of sight (the working file is not touched): a
        :class:`~mgit.model.placing.Patch` of the working file where in place was asked for,
        it writes at most half of the file and ``clean()`` says the working file holds what was
        checked out (the chunks left alone are trusted from it), else the whole file, to rename
        into place. Every carried chunk written is verified; the staged file now belongs to
        what is returned."""
        try:
            plan = self._patch_plan(clean)
            if plan is None:
                todo, rest = self.carried, []
            else:
                todo, seen = plan
                moved = {c[0] for c in todo}
                rest = [c for c in self.carried if c[0] not in moved]
            self.carried = []
            self._fill(self.fd, todo, pool)
        finally:
            if self.source is not None:
                self.source.close()
        fd, self.fd = self.fd, -1
        if plan is None:
            os.close(fd)
            return Replacement(self.tmp, self.dest)
        ranges = self.merged + [(at, size) for at, _, size in todo]
        return Patch(self.dest, self.tmp, fd, ranges, seen, lambda into: self._fill(into, rest, pool))

    def _patch_plan(self, clean: Callable[[], bool]) -> tuple[list[Placed], os.stat_result] | None:
        """The carried chunks the working file lacks at their offsets, and its status before it
        was found clean, when it can be patched in place: it is the very file (a regular one,
        no other name linked to it, no symlink) whose chunks the source knows, no other process
        has it open or mapped, it has the merged file's size and header, the merged and missing
        chunks make at most half of it, and it holds what was checked out (``clean()``, asked
        last: it may hash the whole file). None: install by rename."""
        source = self.source
        if not self.in_place or source is None:
            return None
        misplaced = [c for c in self.carried if source.local.get(c[1], (-1, 0))[0] != c[0]]
        patch_bytes = sum(size for _, size in self.merged) + sum(c[2] for c in misplaced)
        if 2 * patch_bytes > self.file_size:  # decided before any look at the file or at /proc
            return None
        if not patchable(self.dest, source.fd, self.file_size, self.header):
            return None
        try:
            seen = os.lstat(self.dest)
        except OSError:
            return None
        return (misplaced, seen) if clean() else None

    def discard(self) -> None:
        if self.source is not None:
            self.source.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
            self.tmp.unlink(missing_ok=True)


def prepare_entry(
    graph: Graph,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    entry: Entry,
    dest: Path,
    rel: str,
    reuse: tuple[Path, LocalChunks] | None = None,
    bar: Bar | None = None,
) -> Replacement:
    """Write one entry, whole and verified, to a temporary file beside ``dest`` (renamed into
    place by the caller's :meth:`~mgit.model.placing.Replacement.apply`)."""
    bar = bar or Bar()
    tmp = temporary(dest)
    try:
        fd = os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600)
        try:
            if entry.kind == "blob":
                data = graph.blob(entry.oid)
                pwrite_all(fd, data, 0, dest)
                bar.advance(len(data))
            else:
                lead, placed = laid_out(graph, entry, rel)
                pwrite_all(fd, lead, 0, dest)
                bar.advance(len(lead))
                os.ftruncate(fd, end_of(lead, placed))
                with naming_owners(rel, committed_layout(graph, entry, rel)):
                    write_chunks_at(store, pool, fd, placed, reuse, bar, dest)
        finally:
            os.close(fd)
        os.chmod(tmp, 0o755 if entry.mode == MODE_EXEC else 0o644)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(dest)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return Replacement(tmp, dest)
