"""The content-addressed chunk store: chunk id = BLAKE3 of the raw bytes.

Chunks live in pack files (see pack.py). A write session appends to one new pack and
seals it at the end of the command; readers see only sealed packs. Each chunk is stored
byte-grouped + zstd, raw, or as an XOR delta against a base chunk, whichever is
smallest; a delta chain is at most MAX_DELTA_DEPTH links long, after which a full
"keyframe" is stored, so reading any chunk decodes at most MAX_DELTA_DEPTH others.
Every read is verified against the id. Chunks of format-1 repositories (one file per
chunk under ``chunks/ab/``) are still read; gc packs them.
"""

from __future__ import annotations

import os
import struct
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import blake3

from mgit.errors import CorruptObjectError
from mgit.store import codec
from mgit.store.pack import (
    BASE_LEN,
    RECORD,
    Location,
    PackIndex,
    PackReader,
    PackWriter,
    Record,
    idx_path,
    scan_pack,
    write_index,
)

MAX_DELTA_DEPTH = 4
# A delta at most this share of the raw size is taken without also trying the plain
# encoding: byte-grouped zstd of float weights stays above ~0.6x, so trying it would
# cost a second compression (~40 % of an add's or a merge's CPU) for nothing.
SURE_DELTA = 0.5
LOOSE_MAGIC = b"MGC1"
_LOOSE_HEADER = struct.Struct("<4sBBxxQ")


def chunk_id(raw: bytes | memoryview) -> str:
    return blake3.blake3(raw).hexdigest()


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
        self.reads = ReadCounters()
        self._lock = threading.RLock()  # indexes, readers, which writer is open
        # Appends to (and reads from) the open pack: apart from _lock, so that writing a record
        # never holds up lookups and reads of other chunks on other threads.
        self._append_lock = threading.Lock()
        self._indexes: dict[Path, PackIndex] = {}
        self._readers: dict[Path, PackReader] = {}
        self._writer: PackWriter | None = None
        # A partial clone's hook: called with the id of a chunk this store lacks, it fetches the
        # chunk (and its delta bases) into this store's write session, or raises.
        self.fallback: Callable[[str], None] | None = None

    # -- finding chunks -----------------------------------------------------------------

    def refresh(self) -> None:
        """Pick up packs sealed since we last looked (by us or another process)."""
        with self._lock:
            if not self.pack_dir.is_dir():
                return
            for path in sorted(self.pack_dir.glob("pack-*.idx")):
                if path not in self._indexes:
                    try:
                        self._indexes[path] = PackIndex(path)
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
            if not self._indexes:
                self.refresh()
            for idx in self._indexes.values():
                loc = idx.find(cid)
                if loc is not None:
                    return loc
            if not refresh:
                return None
            before = len(self._indexes)
            self.refresh()
            if len(self._indexes) != before:
                for idx in list(self._indexes.values())[before:]:
                    loc = idx.find(cid)
                    if loc is not None:
                        return loc
        return None

    def loose_path(self, cid: str) -> Path:
        return self.root / cid[:2] / cid[2:]

    def has(self, cid: str, refresh: bool = True) -> bool:
        """Whether the chunk is here; ``refresh=False`` skips looking for packs sealed by other
        processes since the last look (a writer holding the lock knows there are none)."""
        return self.locate(cid, refresh) is not None or self.loose_path(cid).exists()

    def stored_size(self, cid: str) -> int:
        loc = self.locate(cid)
        if loc is not None:
            return loc.length
        return self.loose_path(cid).stat().st_size

    def payload_size(self, cid: str) -> int:
        """The length of the chunk's stored (encoded) payload, from the pack index or the loose
        file's size: nothing is read (a remote sizes what it would send this way)."""
        loc = self.locate(cid)
        if loc is not None:
            return loc.length - RECORD.size - (BASE_LEN if loc.base else 0)
        return self.loose_path(cid).stat().st_size - _LOOSE_HEADER.size

    def read_cost(self, cid: str, known: frozenset[str] | set[str] = frozenset()) -> int:
        """Stored bytes a read of this chunk touches: itself and its delta bases, up to a
        base in ``known`` (chunks the caller already holds decoded, see ``get``)."""
        cost = 0
        loc = self.locate(cid)
        if loc is None:
            return self.loose_path(cid).stat().st_size if self.loose_path(cid).exists() else 0
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
        self, raw: bytes | memoryview, group: int, cid: str | None = None, base: tuple[str, bytes] | None = None
    ) -> PutResult:
        """Store raw bytes unless present; with ``base`` (id, raw bytes) try an XOR delta.

        The smallest of delta / byte-grouped zstd / raw wins, except that a delta of at
        most SURE_DELTA of the raw size is taken without trying the others; a delta whose
        chain would exceed MAX_DELTA_DEPTH is not considered (the chunk becomes a keyframe).
        """
        cid = cid or chunk_id(raw)
        # Writers hold the repository lock, so no other process seals packs meanwhile.
        if self.locate(cid, refresh=False) is not None or self.loose_path(cid).exists():
            return PutResult(cid, 0)
        delta, base_id, depth = None, None, 0
        if base is not None:
            base_depth = self.depth(base[0])
            if base_depth + 1 <= MAX_DELTA_DEPTH:
                delta, base_id, depth = codec.encode_delta(raw, base[1], group), base[0], base_depth + 1
        if delta is not None and len(delta) <= SURE_DELTA * len(raw):
            encoding, payload = codec.XOR_DELTA, delta
        else:
            encoding, payload = codec.encode(raw, group)
            if delta is not None and len(delta) < len(payload):
                encoding, payload = codec.XOR_DELTA, delta
            else:
                base_id, depth = None, 0
        return self._append(Record(cid, encoding, group, depth, len(raw), payload, base_id))

    def _append(self, record: Record) -> PutResult:
        """Write a record to this session's pack unless the chunk is already here."""
        with self._lock:
            if self.locate(record.cid, refresh=False) is not None:
                return PutResult(record.cid, 0)
            if self._writer is None:
                self._writer = PackWriter(self.pack_dir)
            writer = self._writer
        with self._append_lock:
            if record.cid in writer.entries:  # another thread wrote it meanwhile
                return PutResult(record.cid, 0)
            loc = writer.append(record)
        return PutResult(record.cid, loc.length, record.encoding, record.base)

    def export(self, cid: str) -> Record:
        """The chunk's stored record as it is (encoding, delta base, payload), for sending
        to another store; loose format-1 chunks come as keyframes."""
        loc = self.locate(cid)
        if loc is None:
            if self.loose_path(cid).exists():
                return self.loose_record(cid)
            raise CorruptObjectError(f"chunk {cid[:12]} is missing from the store; run `mgit fsck`")
        rec_id, encoding, group, depth, payload, base_id, raw_size = self.read_record(loc)
        if rec_id != cid:
            raise CorruptObjectError(f"chunk {cid[:12]} is corrupt (bad record in its pack); run `mgit fsck`")
        return Record(cid, encoding, group, depth, raw_size, bytes(payload), base_id)

    def receive(self, record: Record, what: str = "") -> PutResult:
        """Store a record received from elsewhere after decoding it and checking it against
        its id (a delta's base must already be here). The record is kept as sent unless its
        delta chain would grow past MAX_DELTA_DEPTH here; then the chunk is stored anew."""
        cid = record.cid
        if self.locate(cid, refresh=False) is not None or self.loose_path(cid).exists():
            return PutResult(cid, 0)
        where = f" of {what}" if what else ""
        try:  # before anything is decoded (its delta base included): a small record can claim a GiB
            codec.check_raw_size(record.raw_size)
        except codec.ChunkTooLargeError as exc:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} {exc}; refusing it (damaged or hostile)") from None
        if record.encoding not in codec.ENCODINGS:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} uses encoding {record.encoding}, unknown to this mgit")
        base = None
        base_loc = self.locate(record.base, refresh=False) if record.base else None
        if record.encoding == codec.XOR_DELTA:
            if base_loc is None and not (record.base and self.loose_path(record.base).exists()):
                raise CorruptObjectError(f"chunk {cid[:12]}{where} arrived before the chunk it is a delta of")
            base = self.get(record.base, what)
        try:
            raw = codec.decode(record.encoding, record.payload, record.group, record.raw_size, base)
        except codec.ChunkTooLargeError as exc:
            raise CorruptObjectError(f"chunk {cid[:12]}{where}: {exc}; refusing it (damaged or hostile)") from None
        except Exception:
            raw = None
        if raw is None or len(raw) != record.raw_size or chunk_id(raw) != cid:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} does not match its id (damaged or tampered with)")
        depth = (base_loc.depth if base_loc is not None else 0) + 1 if record.encoding == codec.XOR_DELTA else 0
        if depth > MAX_DELTA_DEPTH:
            return self.put(raw, record.group, cid)
        base = record.base if record.encoding == codec.XOR_DELTA else None
        return self._append(Record(cid, record.encoding, record.group, depth, record.raw_size, record.payload, base))

    def seal(self) -> None:
        """Make this session's chunks visible to other processes (end of a command)."""
        with self._lock, self._append_lock:
            if self._writer is None:
                return
            path = self._writer.seal()
            self._writer = None
            if path is not None:
                self._indexes[idx_path(path)] = PackIndex(idx_path(path))

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

    def read_record(self, loc: Location) -> tuple[str, int, int, int, bytes, str | None, int]:
        with self._lock:
            writer = self._writer if self._writer is not None and loc.pack == self._writer.path else None
            if writer is None:
                reader = self._reader(loc.pack)
        if writer is None:
            return reader.record(loc)
        with self._append_lock:  # the open pack: flush what is buffered, then read it back
            writer.flush()
            data = os.pread(writer.fileno(), loc.length, loc.offset)
        return _parse_record(data)

    def _drop_pages(self, loc: Location) -> None:
        reader = self._readers.get(loc.pack)
        if reader is not None:
            reader.drop_pages(loc)

    def get(
        self,
        cid: str,
        what: str = "",
        _depth: int = 0,
        known: Callable[[str], bytes | memoryview | None] | None = None,
        counters: ReadCounters | None = None,
    ) -> bytes | memoryview:
        """Read, decode and verify a chunk; ``what`` names the tensor or file for errors.

        ``known`` may supply the raw bytes of a delta base the caller already holds (a
        merge holds the base model's chunk that an expert's chunk is a delta against), so
        that base is not read and decoded again; the result is verified all the same.
        ``counters`` also receives this read's costs (``reads`` sums every read), for
        callers that measure reads made concurrently.
        """
        where = f" of {what}" if what else ""
        loc = self.locate(cid)
        if loc is None and self.fallback is not None and not self.loose_path(cid).exists():
            self.fallback(cid)
            loc = self.locate(cid)
        if loc is None:
            return self._get_loose(cid, where, counters)
        if _depth > MAX_DELTA_DEPTH:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} has a delta chain longer than {MAX_DELTA_DEPTH}")
        if loc.encoding not in codec.ENCODINGS:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} uses encoding {loc.encoding}, unknown to this mgit")
        try:
            try:
                record = self.read_record(loc)
            except FileNotFoundError:  # another process's gc replaced the pack: look again
                self.forget_indexes()
                loc = self.locate(cid)
                if loc is None:
                    return self._get_loose(cid, where, counters)
                record = self.read_record(loc)
            rec_id, encoding, group, _, payload, base_id, raw_size = record
        except (OSError, ValueError, struct.error):
            rec_id = None
        if rec_id != cid:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} is corrupt (bad record in its pack); run `mgit fsck`")
        base = None
        if encoding == codec.XOR_DELTA:
            base = known(base_id) if known is not None else None
            if base is None:
                base = self.get(base_id, what, _depth + 1, known, counters)
        try:
            raw = codec.decode(encoding, payload, group, raw_size, base)
        except Exception:
            raw = None
        finally:
            del payload
            self._drop_pages(loc)
        if raw is None or len(raw) != raw_size or chunk_id(raw) != cid:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} is corrupt (fails verification); run `mgit fsck`")
        self._count(loc.length, len(raw), counters)
        return raw

    def _get_loose(self, cid: str, where: str, counters: ReadCounters | None = None) -> bytes | memoryview:
        try:
            data = self.loose_path(cid).read_bytes()
        except FileNotFoundError:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} is missing from the store; run `mgit fsck`") from None
        raw = None
        try:
            magic, encoding, group, raw_size = _LOOSE_HEADER.unpack_from(data)
            if magic == LOOSE_MAGIC and encoding != codec.XOR_DELTA:
                raw = codec.decode(encoding, data[_LOOSE_HEADER.size :], group, raw_size)
        except Exception:
            raw = None
        if raw is None or chunk_id(raw) != cid:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} is corrupt (fails verification); run `mgit fsck`")
        self._count(len(data), len(raw), counters)
        return raw

    def loose_record(self, cid: str) -> Record:
        """A format-1 loose chunk as a pack record, keeping its encoding and grouping."""
        data = self.loose_path(cid).read_bytes()
        _, encoding, group, raw_size = _LOOSE_HEADER.unpack_from(data)
        return Record(cid, encoding, group, 0, raw_size, data[_LOOSE_HEADER.size :])

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

    def check_packs(self) -> list[str]:
        """Pack-level damage: index checksums, magic bytes, record headers (fsck)."""
        problems = []
        if not self.pack_dir.is_dir():
            return problems
        for idx_file in sorted(self.pack_dir.glob("pack-*.idx")):
            try:
                index = PackIndex(idx_file)
                problems += self._reader(index.pack).check_layout(index)
            except (OSError, ValueError) as exc:
                problems.append(str(exc))
        return problems

    def damaged_packs(self) -> list[str]:
        """Names of the sealed packs whose own bytes are damaged (magic, record headers) though
        their index reads: what a repair rewrites from the records that still verify."""
        out = []
        for idx_file in sorted(self.pack_dir.glob("pack-*.idx")) if self.pack_dir.is_dir() else []:
            try:
                index = PackIndex(idx_file)
                if self._reader(index.pack).check_layout(index):
                    out.append(index.pack.name)
            except (OSError, ValueError):
                continue
        return out

    def rebuild_damaged_indexes(self) -> list[str]:
        """Rewrite every pack index that fails its checksum from its pack's records (repair);
        returns the packs' names. The chunks are not vouched for: verify them afterwards."""
        rebuilt = []
        with self._lock:
            for idx_file in sorted(self.pack_dir.glob("pack-*.idx")) if self.pack_dir.is_dir() else []:
                try:
                    PackIndex(idx_file)
                except (OSError, ValueError):
                    write_index(idx_file, scan_pack(idx_file.with_suffix(".pack")))
                    rebuilt.append(idx_file.with_suffix(".pack").name)
            if rebuilt:
                self.forget_indexes()
        return rebuilt

    def loose_ids(self) -> Iterator[str]:
        """Chunks stored one file each (format 1)."""
        if not self.root.is_dir():
            return
        for sub in sorted(self.root.iterdir()):
            if len(sub.name) == 2 and sub.is_dir():
                for f in sorted(sub.iterdir()):
                    if len(f.name) == 62 and not f.name.startswith("."):
                        yield sub.name + f.name


def _parse_record(data: bytes) -> tuple[str, int, int, int, bytes, str | None, int]:
    from mgit.store.pack import BASE_LEN, RECORD

    raw_id, encoding, group, depth, _, length, raw_size = RECORD.unpack_from(data)
    start = RECORD.size
    base = None
    if encoding == codec.XOR_DELTA:
        base = data[start : start + BASE_LEN].hex()
        start += BASE_LEN
    return raw_id.hex(), encoding, group, depth, data[start : start + length], base, raw_size
