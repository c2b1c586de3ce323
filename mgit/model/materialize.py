"""Graph entries → files on disk, byte-exact.

A file is written to a temporary name beside its destination and renamed into place,
so a killed checkout never leaves a half-written model. Chunks the old local file
already holds (same id, re-verified by hash) are copied from it instead of being read
and decoded from the store.
"""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from glob import escape as glob_escape
from pathlib import Path

from mgit.graph.objects import MODE_EXEC, Graph
from mgit.graph.snapshot import Entry
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.model.safetensors_file import parse_header
from mgit.parallel import WORKERS, ordered_map
from mgit.progress import Bar
from mgit.store.chunkstore import MAX_DELTA_DEPTH, ChunkStore
from mgit.store.record import RawBytes, chunk_id

TMP_MARK = ".mgit-tmp-"
# Chunks in flight while writing a file. A chunk's bytes live only while its worker decodes and
# writes it; the rest of the window is results (byte counts) waiting for an earlier, slower
# chunk, so a long window costs no memory and keeps every worker busy past a slow chunk.
WINDOW = 8 * WORKERS

# chunk id → (offset, size) in a local file known to be clean
LocalChunks = dict[str, tuple[int, int]]


def entry_size(graph: Graph, entry: Entry) -> int:
    if entry.kind == "safetensors":
        return load_safetensors(graph, entry.oid).file_size
    if entry.kind == "chunked":
        return load_chunked(graph, entry.oid).size
    return len(graph.blob(entry.oid))


def local_chunks(graph: Graph, entry: Entry) -> LocalChunks:
    """Where each chunk of a committed file lies inside that file."""
    out: LocalChunks = {}
    if entry.kind == "safetensors":
        stored = load_safetensors(graph, entry.oid)
        for t in stored.layout.tensors:
            offset = stored.layout.data_start + t.begin
            for c in stored.manifests[t.name].chunks:
                out.setdefault(c.id, (offset, c.size))
                offset += c.size
    elif entry.kind == "chunked":
        offset = 0
        for c in load_chunked(graph, entry.oid).chunks:
            out.setdefault(c.id, (offset, c.size))
            offset += c.size
    return out


def _plan(graph: Graph, entry: Entry, rel: str) -> tuple[bytes, list[tuple[str, int, str]]]:
    """(leading bytes, [(chunk id, size, what)]) making up the file in order."""
    if entry.kind == "chunked":
        return b"", [(c.id, c.size, rel) for c in load_chunked(graph, entry.oid).chunks]
    stored = load_safetensors(graph, entry.oid, rel)
    parts = []
    for t in stored.layout.tensors:
        what = f"tensor {t.name!r} in {rel}"
        parts += [(c.id, c.size, what) for c in stored.manifests[t.name].chunks]
    return stored.layout.header, parts


def store_reads(graph: Graph, entry: Entry, rel: str, local: LocalChunks | None = None) -> list[str]:
    """Chunk ids that writing ``entry`` reads from the store, once per read (a chunk used
    twice is read twice), leaving out those a clean local file supplies (``local``): what
    :func:`write_entry` will do, priced before it runs."""
    if entry.kind == "blob":
        return []
    local = local or {}
    return [cid for cid, _, _ in _plan(graph, entry, rel)[1] if cid not in local]


def _write_chunks(
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    fd: int,
    start: int,
    parts: list[tuple[str, int, str]],
    reuse: tuple[Path, LocalChunks] | None,
    bar: Bar,
    dest: Path | None = None,
) -> None:
    """Decode chunks and pwrite them at their offsets from the workers: the page-cache
    writes then run on every core instead of one."""
    offsets = []
    for _, size, _ in parts:
        offsets.append(start)
        start += size
    os.ftruncate(fd, start)

    with ChunkSource(store, reuse, missing_ok=False) as source:

        def one(i: int) -> int:
            cid, size, what = parts[i]
            data = source.get(cid, size, what)
            _pwrite_all(fd, data, offsets[i], dest)
            return len(data)

        ahead = _ReadAhead(store, source.fd, source.local)

        def submitted() -> Iterator[int]:
            """Chunk indexes, each submitted once the one WINDOW places later is asked for."""
            for i in range(min(WINDOW, len(parts))):
                ahead.advise(*parts[i][:2])
            for i in range(len(parts)):
                if i + WINDOW < len(parts):
                    ahead.advise(*parts[i + WINDOW][:2])
                yield i

        try:
            for n in ordered_map(pool, one, submitted(), window=WINDOW):
                bar.advance(n)
        finally:
            ahead.close()


class ChunkSource:
    """Chunk bytes by id for writing a file: copied from a local file that holds them (re-verified
    by hash: it may have changed since), else read and decoded from the store."""

    def __init__(self, store: ChunkStore, reuse: tuple[Path, LocalChunks] | None, missing_ok: bool = True):
        self.store = store
        self.local = reuse[1] if reuse else {}
        self.fd: int | None = None
        if reuse is not None:
            try:
                self.fd = os.open(reuse[0], os.O_RDONLY)
            except OSError:
                if not missing_ok:
                    raise
                self.local = {}

    def get(self, cid: str, size: int, what: str) -> RawBytes:
        if self.fd is not None and cid in self.local:
            data = os.pread(self.fd, size, self.local[cid][0])
            if len(data) == size and chunk_id(data) == cid:
                return data
        return self.store.get(cid, what)

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


def _pwrite_all(fd: int, data: RawBytes, offset: int, dest: Path | None) -> None:
    """pwrite all of ``data``: a short write is retried, so a full disk reports ENOSPC
    (naming the file) instead of a bare short count."""
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view, offset = view[n:], offset + n
    except OSError as exc:
        if dest is not None and exc.filename is None:
            raise OSError(exc.errno, exc.strerror, str(dest)) from None
        raise


def _temporary(dest: Path) -> Path:
    dest.parent.mkdir(parents=True, exist_ok=True)
    for stale in dest.parent.glob(f".{glob_escape(dest.name)}{TMP_MARK}*"):
        stale.unlink(missing_ok=True)  # left by a killed checkout (we hold the repository lock)
    return dest.parent / f".{dest.name}{TMP_MARK}{uuid.uuid4().hex[:8]}"


class StagedFile:
    """A safetensors file written while its tensors are being produced: a merge writes each
    merged chunk here as it stores it, so the checkout that follows renames the file into
    place instead of decoding every chunk again. It lives in a staging directory of the
    repository (same file system) until installed; a killed merge leaves it there, and the
    next merge or gc clears that directory."""

    def __init__(self, dest: Path, staging: Path, header: bytes, data_size: int, source: ChunkSource | None = None):
        self.dest = dest
        self.source = source  # where carried chunks' bytes come from
        self.carried: list[tuple[int, str, int, str]] = []  # (file offset, chunk id, size, what) still to write
        layout = parse_header(header, len(header) + data_size, str(dest))
        self.offsets = {t.name: layout.data_start + t.begin for t in layout.tensors}
        staging.mkdir(parents=True, exist_ok=True)
        self.tmp = staging / f"{uuid.uuid4().hex[:12]}-{dest.name}"
        self.fd = os.open(self.tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.ftruncate(self.fd, layout.file_size)
        self._pwrite(header, 0)
        self.entry_oid: str | None = None  # set once every tensor is written and the entry is known

    def _pwrite(self, data: RawBytes, offset: int) -> None:
        _pwrite_all(self.fd, data, offset, self.tmp)

    def write(self, tensor: str, offset: int, data: bytes | memoryview) -> None:
        """Bytes of ``tensor`` at ``offset`` within it (from any thread)."""
        self._pwrite(data, self.offsets[tensor] + offset)

    def carry(self, tensor: str, offset: int, cid: str, size: int, what: str) -> None:
        """A chunk of ``tensor`` at ``offset`` that is already stored (a merge carried the base's):
        its bytes are written when the file is installed (a file that is not, because the merge
        left it as the working tree holds it, costs nothing more)."""
        self.carried.append((self.offsets[tensor] + offset, cid, size, what))

    def _fill(self, pool: ThreadPoolExecutor | None) -> None:
        """Write every carried chunk (copied from the source's local file, else decoded)."""
        todo, self.carried = self.carried, []
        if not todo:
            return
        if self.source is None:
            raise AssertionError("a staged file with carried chunks needs a chunk source")
        source = self.source

        def one(item: tuple[int, str, int, str]) -> None:
            at, cid, size, what = item
            self._pwrite(source.get(cid, size, what), at)

        try:
            for _ in ordered_map(pool, one, todo) if pool is not None else map(one, todo):
                pass
        finally:
            source.close()

    def install(self, pool: ThreadPoolExecutor | None = None) -> os.stat_result:
        """Write the carried chunks, then move into place (the file's entry is committed);
        returns the new file's stat."""
        self._fill(pool)
        os.close(self.fd)
        self.fd = -1
        self.dest.parent.mkdir(parents=True, exist_ok=True)
        os.replace(self.tmp, self.dest)
        return os.stat(self.dest)

    def discard(self) -> None:
        if self.source is not None:
            self.source.close()
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1
        self.tmp.unlink(missing_ok=True)


def write_entry(
    graph: Graph,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    entry: Entry,
    dest: Path,
    rel: str,
    reuse: tuple[Path, LocalChunks] | None = None,
    bar: Bar | None = None,
) -> None:
    """Materialise one entry at ``dest`` atomically."""
    bar = bar or Bar()
    tmp = _temporary(dest)
    try:
        with open(tmp, "wb") as out:
            if entry.kind == "blob":
                data = graph.blob(entry.oid)
                out.write(data)
                bar.advance(len(data))
            else:
                lead, parts = _plan(graph, entry, rel)
                out.write(lead)
                out.flush()
                bar.advance(len(lead))
                _write_chunks(store, pool, out.fileno(), len(lead), parts, reuse, bar, dest)
        os.chmod(tmp, 0o755 if entry.mode == MODE_EXEC else 0o644)
        os.replace(tmp, dest)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        if exc.filename is None:  # buffered writes name no file: name the one being written
            raise OSError(exc.errno, exc.strerror, str(dest)) from None
        raise
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
