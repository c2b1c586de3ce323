"""The content-addressed chunk store: chunk id = BLAKE3 of the raw bytes.

Chunks live in pack files (see pack.py). A write session appends to one new pack and
seals it at the end of the command; readers see only sealed packs. Each chunk is stored
byte-grouped + zstd, raw, or as a delta (difference or XOR) against a base chunk, whichever is
smallest; a delta chain is at most MAX_DELTA_DEPTH links long, after which a full
"keyframe" is stored, so reading any chunk decodes at most MAX_DELTA_DEPTH others.
Every read is verified against the id (record.decode_verified). Chunks of format-1
repositories (one file per chunk under ``chunks/ab/``, loose.py) are still read; gc packs them.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from mgit.errors import CorruptObjectError, DamagedChunkError, chunks_of
from mgit.store import codec, record
from mgit.store.index_set import IndexSet
from mgit.store.limits import MAX_CHUNK_BYTES
from mgit.store.loose import LooseChunks
from mgit.store.pack import Location, PackIndex, PackReader, PackWriter, idx_path
from mgit.store.record import RawBytes, Record, chunk_id

MAX_DELTA_DEPTH = 4


@dataclass
class ReadCounters:
    """What reads cost: chunks decoded (delta bases included), stored bytes, raw bytes."""

    chunks: int = 0
    stored_bytes: int = 0
    raw_bytes: int = 0

    def add(self, stored: int, raw: int) -> None:
        self.chunks += 1
        self.stored_bytes += stored
        self.raw_bytes += raw


@dataclass(frozen=True)
class PutResult:
    cid: str
    written: int  # stored bytes newly written (0 when deduplicated)
    encoding: int | None = None
    base: str | None = None


class ChunkStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.pack_dir = self.root / "packs"
        self.loose = LooseChunks(self.root)  # format 1's chunk files, read only
        self.reads = ReadCounters()
        self._lock = threading.RLock()  # indexes, readers, which writer is open
        # Appends to (and reads from) the open pack: apart from _lock, so that writing a record
        # never holds up lookups and reads of other chunks on other threads.
        self._append_lock = threading.Lock()
        self._indexes: dict[Path, PackIndex] = {}
        self._index_set: IndexSet | None = None  # _indexes searched as one; None: to be rebuilt
        self._looked = False  # whether the pack directory was listed yet (an empty store's too)
        self._readers: dict[Path, PackReader] = {}
        self._writer: PackWriter | None = None
        self._random = 0  # open random_reads() contexts: while > 0, sealed records are read exactly
        # A partial clone's hook: called with the id of a chunk this store lacks, it fetches the
        # chunk (and its delta bases) into this store's write session, or raises.
        self.fallback: Callable[[str], None] | None = None

    # -- finding chunks -----------------------------------------------------------------

    def refresh(self) -> None:
        """Pick up packs sealed since we last looked (by us or another process)."""
        with self._lock:
            self._looked = True
            if not self.pack_dir.is_dir():
                return
            for path in sorted(self.pack_dir.glob("pack-*.idx")):
                if path not in self._indexes:
                    try:
                        self._indexes[path] = PackIndex(path)
                        self._index_set = None
                    except (OSError, ValueError) as exc:
                        raise CorruptObjectError(f"{exc}; run `mgit fsck`") from None

    def indexes(self) -> list[PackIndex]:
        self.refresh()
        return list(self._indexes.values())

    def locate(self, cid: str, refresh: bool = True) -> Location | None:
        """Where a chunk is; on a miss, look for newly sealed packs unless ``refresh`` is off."""
        with self._lock:
            if self._writer is not None and cid in self._writer.entries:
                return self._writer.entries[cid]
            if not self._looked:  # once: a store with no packs yet is not listed again per lookup
                self.refresh()
            loc = self._sealed().find(cid)
            if loc is not None or not refresh:
                return loc
            self.refresh()  # packs sealed since the last look drop the set: search again
            return self._sealed().find(cid) if self._index_set is None else None

    def _sealed(self) -> IndexSet:  # the sealed packs' indexes as one, rebuilt when packs came or went
        if self._index_set is None:
            self._index_set = IndexSet(list(self._indexes.values()))
        return self._index_set

    def has(self, cid: str, refresh: bool = True) -> bool:
        """Whether the chunk is here; ``refresh=False`` skips looking for packs sealed by other
        processes since the last look (a writer holding the lock knows there are none)."""
        return self.locate(cid, refresh) is not None or self.loose.has(cid)

    def stored_size(self, cid: str) -> int:
        loc = self.locate(cid)
        if loc is not None:
            return loc.length
        return self.loose.stored_size(cid)

    def payload_size(self, cid: str) -> int:
        """The length of the chunk's stored (encoded) payload, from the pack index or the loose
        file's size: nothing is read (a remote sizes what it would send this way)."""
        loc = self.locate(cid)
        if loc is not None:
            return record.payload_length(loc.encoding, loc.length)
        return self.loose.payload_size(cid)

    def read_cost(self, cid: str, known: frozenset[str] | set[str] = frozenset()) -> int:
        """Stored bytes a read of this chunk touches: itself and its delta bases, up to a
        base in ``known`` (chunks the caller already holds decoded, see ``get``)."""
        cost = 0
        loc = self.locate(cid)
        if loc is None:
            return self.loose.stored_size(cid) if self.loose.has(cid) else 0
        while loc is not None:
            cost += loc.length
            loc = self.locate(loc.base) if loc.base and loc.base not in known else None
        return cost

    def depth(self, cid: str) -> int:
        loc = self.locate(cid)
        return loc.depth if loc is not None else 0

    def location(self, cid: str) -> Location | None:
        return self.locate(cid)

    # -- writing ------------------------------------------------------------------------

    def put(
        self,
        raw: RawBytes,
        group: int,
        cid: str | None = None,
        base: tuple[str, RawBytes] | None = None,
        opaque: bool = False,
    ) -> PutResult:
        """Store raw bytes unless present; with ``base`` (id, raw bytes) try a delta (difference
        or XOR; a patch delta for ``opaque`` bytes, a chunk of a large non-tensor file).

        The smallest of delta / byte-grouped zstd / raw wins (record.encode); a delta whose
        chain would exceed MAX_DELTA_DEPTH is not considered (the chunk becomes a keyframe).
        """
        cid = cid or chunk_id(raw)
        # Writers hold the repository lock, so no other process seals packs meanwhile.
        if self.locate(cid, refresh=False) is not None or self.loose.has(cid):
            return PutResult(cid, 0)
        delta_base = None
        if base is not None:
            depth = self.depth(base[0]) + 1
            if depth <= MAX_DELTA_DEPTH:
                delta_base = (base[0], base[1], depth)
        return self._append(record.encode(cid, raw, group, delta_base, opaque))

    def _append(self, rec: Record) -> PutResult:
        """Write a record to this session's pack unless the chunk is already here."""
        with self._lock:
            if self.locate(rec.cid, refresh=False) is not None:
                return PutResult(rec.cid, 0)
            if self._writer is None:
                self._writer = PackWriter(self.pack_dir)
            writer = self._writer
        with self._append_lock:
            if rec.cid in writer.entries:  # another thread wrote it meanwhile
                return PutResult(rec.cid, 0)
            loc = writer.append(rec)
        return PutResult(rec.cid, loc.length, rec.encoding, rec.base)

    def export(self, cid: str) -> Record:
        """The chunk's stored record as it is (encoding, delta base, payload), for sending
        to another store; loose format-1 chunks come as keyframes."""
        loc = self.locate(cid)
        if loc is None:
            if self.loose.has(cid):
                return self.loose_record(cid)
            raise CorruptObjectError(f"chunk {cid[:12]} is missing from the store; run `mgit fsck`")
        rec = self.read_record(loc)
        if rec.cid != cid:
            raise CorruptObjectError(f"chunk {cid[:12]} is corrupt (bad record in its pack); run `mgit fsck`")
        return Record(cid, rec.encoding, rec.group, rec.depth, rec.raw_size, bytes(rec.payload), rec.base)

    def receive(self, rec: Record, what: str = "") -> PutResult:
        """Store a record received from elsewhere after decoding it and checking it against
        its id (a delta's base must already be here). The record is kept as sent unless its
        delta chain would grow past MAX_DELTA_DEPTH here; then the chunk is stored anew."""
        cid = rec.cid
        if self.locate(cid, refresh=False) is not None or self.loose.has(cid):
            return PutResult(cid, 0)
        where = f" of {what}" if what else ""
        try:  # before anything is decoded (its delta base included): a small record can claim a GiB
            record.check_header(rec)
        except codec.ChunkTooLargeError as exc:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} {exc}; refusing it (damaged or hostile)") from None
        except record.UnknownEncodingError as exc:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} {exc}") from None
        base = None
        base_loc = self.locate(rec.base, refresh=False) if rec.base else None
        if rec.is_delta:
            if rec.base is None or (base_loc is None and not self.loose.has(rec.base)):
                raise CorruptObjectError(f"chunk {cid[:12]}{where} arrived before the chunk it is a delta of")
            with chunks_of(what):
                base = self.get(rec.base)
        try:
            raw = record.decode_verified(rec, base)
        except codec.ChunkTooLargeError as exc:
            raise CorruptObjectError(f"chunk {cid[:12]}{where}: {exc}; refusing it (damaged or hostile)") from None
        except record.MismatchError:
            raise CorruptObjectError(
                f"chunk {cid[:12]}{where} does not match its id (damaged or tampered with)"
            ) from None
        depth = (base_loc.depth if base_loc is not None else 0) + 1 if rec.is_delta else 0
        if depth > MAX_DELTA_DEPTH:
            return self.put(raw, rec.group, cid)
        base_id = rec.base if rec.is_delta else None
        return self._append(Record(cid, rec.encoding, rec.group, depth, rec.raw_size, rec.payload, base_id))

    def seal(self) -> None:
        """Make this session's chunks visible to other processes (end of a command)."""
        with self._lock, self._append_lock:
            if self._writer is None:
                return
            path = self._writer.seal()
            self._writer = None
            if path is not None:
                self._indexes[idx_path(path)] = PackIndex(idx_path(path))
                self._index_set = None

    def abort(self) -> None:
        """Drop this session's unsealed pack (a failed command)."""
        with self._lock, self._append_lock:
            if self._writer is not None:
                self._writer.abort()
                self._writer = None

    def forget_indexes(self) -> None:
        """Drop cached indexes and mappings (after gc replaced packs)."""
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()
            self._indexes.clear()
            self._index_set, self._looked = None, False

    def close(self) -> None:
        self.seal()
        with self._lock:
            for reader in self._readers.values():
                reader.close()
            self._readers.clear()

    # -- reading ------------------------------------------------------------------------

    def _reader(self, pack: Path) -> PackReader:
        reader = self._readers.get(pack)
        if reader is None:
            reader = self._readers[pack] = PackReader(pack)
        return reader

    @contextmanager
    def random_reads(self) -> Iterator[None]:
        """While open (on any thread; contexts nest), read every sealed record with one
        ``pread`` of exactly its bytes instead of through the pack's mapping, whose
        read-ahead pulls up to 8 MiB around each record from disk. For reads scattered
        over the packs, such as a budgeted merge's chosen chunks; reading whole packs in
        order (checkout, fsck) is faster with the mapping's read-ahead, the default."""
        with self._lock:
            self._random += 1
        try:
            yield
        finally:
            with self._lock:
                self._random -= 1

    def prefetch(self, cids: Iterable[str]) -> None:
        """Start reading these chunks' records (not their delta bases) into the page cache in
        the background, each exactly its own bytes: a caller about to read scattered chunks
        in random_reads() overlaps their disk reads with its work. Unknown ids are skipped."""
        for cid in cids:
            loc = self.locate(cid, refresh=False)
            if loc is None:
                continue
            try:
                with self._lock:
                    if self._writer is not None and loc.pack == self._writer.path:
                        continue  # this session's pack: just written, in the page cache
                    reader = self._reader(loc.pack)
                reader.prefetch(loc)
            except OSError:
                pass  # a hint only; the read itself reports what is wrong

    def read_record(self, loc: Location) -> Record:
        """The record at ``loc``, from a sealed pack (its mapping, or one exact read inside
        random_reads()) or from this session's pack."""
        return self._read(loc, False)[0]

    def _read(self, loc: Location, scratch: bool) -> tuple[Record, bool]:
        """The record at ``loc`` and whether its payload is a view of a pack's mapping; inside
        random_reads() it is read exactly, with ``scratch`` into this thread's read buffer
        (its payload is then valid until this thread's next such read)."""
        with self._lock:
            writer = self._writer if self._writer is not None and loc.pack == self._writer.path else None
            if writer is None:
                reader = self._reader(loc.pack)
                exact = self._random > 0
        if writer is None:
            if not exact:
                return reader.record(loc), True
            if not scratch:
                return reader.read_exact(loc), False
            return reader.read_into(loc, codec.thread_buffer("read", loc.length).data), False
        with self._append_lock:  # the open pack: flush what is buffered, then read it back
            writer.flush()
            data = os.pread(writer.fileno(), loc.length, loc.offset)
        return record.parse(memoryview(data)), False  # a view: slicing bytes would copy the payload

    def _drop_pages(self, loc: Location) -> None:
        reader = self._readers.get(loc.pack)
        if reader is not None:
            reader.drop_pages(loc)

    def get(
        self,
        cid: str,
        *,
        known: Callable[[str], RawBytes | None] | None = None,
        counters: ReadCounters | None = None,
        out: bytearray | memoryview | None = None,
    ) -> RawBytes:
        """Read, decode and verify a chunk. A damaged one raises DamagedChunkError naming it; the
        caller that knows what the chunk is of names that (mgit.errors.chunks_of).

        ``known`` may supply the raw bytes of a delta base the caller already holds (a
        merge holds the base model's chunk that an expert's chunk is a delta against), so
        that base is not read and decoded again; the result is verified all the same.
        ``counters`` also receives this read's costs (``reads`` sums every read), for
        callers that measure reads made concurrently. ``out``: a writable buffer of at least
        the chunk's raw size to decode into (the result is then a view of its first raw-size
        bytes; after an error its contents are undefined), so that a caller reading many
        chunks reuses its buffers: a fresh one costs a page fault per 4 KiB on first touch.
        """
        return self._get(cid, 0, known, counters, out, True)

    def _get(  # noqa: C901 (the hot read path: cache, delta chain, retry in one place)
        self,
        cid: str,
        depth: int,
        known: Callable[[str], RawBytes | None] | None,
        counters: ReadCounters | None,
        out: bytearray | memoryview | None,
        retry: bool,
    ) -> RawBytes:
        """``get``. A delta base it decodes itself goes into this thread's buffer for its depth,
        before the record is read: nothing runs on this thread between reading a record (into
        this thread's read buffer, inside random_reads()) and decoding it."""
        loc = self.locate(cid)
        if loc is None and self.fallback is not None and not self.loose.has(cid):
            self.fallback(cid)
            loc = self.locate(cid)
        if loc is None:
            loose, stored = self.loose.decoded(cid, out)  # format 1's chunk files
            self._count(stored, len(loose), counters)
            return loose
        if depth > MAX_DELTA_DEPTH:
            raise DamagedChunkError(cid, f"has a delta chain longer than {MAX_DELTA_DEPTH}")
        if loc.encoding not in codec.ENCODINGS:
            raise DamagedChunkError(cid, f"uses encoding {loc.encoding}, unknown to this mgit")
        base = None
        if loc.base is not None:
            base = known(loc.base) if known is not None else None
            if base is None and depth == 0 and (whole := self._chain(cid, loc, counters, out)) is not None:
                return whole
            if base is None:
                scratch = codec.thread_buffer(f"base{depth + 1}", MAX_CHUNK_BYTES).data
                base = self._get(loc.base, depth + 1, known, counters, scratch, retry)
        rec: Record | None
        try:
            rec, mapped = self._read(loc, True)
        except FileNotFoundError:  # another process's gc replaced the pack: look again
            if retry:
                self.forget_indexes()
                return self._get(cid, depth, known, counters, out, False)
            rec = None
        except (OSError, ValueError, struct.error):
            rec = None
        if rec is None or rec.cid != cid or rec.base != loc.base:
            raise DamagedChunkError(cid, "is corrupt (bad record in its pack); run `mgit fsck`")
        try:
            raw = record.decode_verified(rec, base, out)
        except (record.RecordError, codec.ChunkTooLargeError):
            raw = None
        finally:
            del rec  # the payload may be a view of the mapping: let go of it before its pages
            if mapped:
                self._drop_pages(loc)
        if raw is None:
            raise DamagedChunkError(cid, "is corrupt (fails verification); run `mgit fsck`")
        self._count(loc.length, len(raw), counters)
        return raw

    def _chain(
        self, cid: str, loc: Location, counters: ReadCounters | None, out: bytearray | memoryview | None
    ) -> RawBytes | None:
        """A delta chunk whose bases nobody holds, decoded from its chain's records at once
        (codec.decode_chain) and verified once: its bases' bytes are never needed on
        their own. None where the chain does not allow that, is not all in packs, or fails in any
        way: then ``_get`` decodes it link by link and names what is damaged."""
        chain = [loc]
        while chain[-1].base is not None and len(chain) <= MAX_DELTA_DEPTH:
            link = self.locate(chain[-1].base, refresh=False)
            if link is None:
                return None
            chain.append(link)
        if not codec.decodes_as_chain([(c.encoding, c.group, c.raw_size) for c in chain]):
            return None
        expected = [cid] + [c.base for c in chain[:-1]]  # the id each link's record must carry
        records: list[Record] = []
        views: list[Location] = []  # read through a pack's mapping: its pages to drop afterwards
        try:
            for c, want in reversed(list(zip(chain, expected, strict=True))):
                rec, mapped = self._read(c, False)
                views += [c] if mapped else []
                if (rec.cid, rec.base) != (want, c.base):
                    return None
                records.append(rec)
            payloads, encodings = [r.payload for r in records], [r.encoding for r in records]
            raw = codec.decode_chain(payloads, encodings, loc.group, loc.raw_size, out)
        except (OSError, struct.error) + codec.DECODE_ERRORS:  # unreadable, or bytes that do not decode
            return None
        finally:
            records.clear()  # payloads may be views of a mapping: let go of them before its pages
            for c in views:
                self._drop_pages(c)
        if chunk_id(raw) != cid:
            return None
        for c in chain:
            self._count(c.length, c.raw_size, counters)
        return raw

    def loose_record(self, cid: str) -> Record:
        """A format-1 loose chunk as a pack record, keeping its encoding and grouping."""
        try:
            return self.loose.read(cid)[0]
        except record.NotARecordError:
            raise CorruptObjectError(f"chunk {cid[:12]} is corrupt (fails verification); run `mgit fsck`") from None

    def _count(self, stored: int, raw: int, counters: ReadCounters | None) -> None:
        with self._lock:
            self.reads.add(stored, raw)
            if counters is not None:
                counters.add(stored, raw)

    def ids(self) -> set[str]:
        """Every chunk id in the store (sealed packs, this session's pack, loose files)."""
        out = {cid for idx in self.indexes() for cid in idx.ids()}
        with self._lock:
            if self._writer is not None:
                out.update(self._writer.entries)
        out.update(self.loose_ids())
        return out

    def loose_ids(self) -> Iterator[str]:
        """Chunks stored one file each (format 1)."""
        return self.loose.ids()
