"""The index: what is staged for the next commit, plus a stat cache of the working tree.

Stored as JSON at ``.mgit/mgit-index.json`` (not git's binary index: our entries are
file trees, not blobs) and replaced atomically. A cached stat is trusted only when the
file's mtime and ctime are strictly older than the filesystem's own clock read before the
stat was taken (``worktree.clock``; "racy" entries are re-hashed), so a write landing in
the same timestamp tick is never missed. Stats a command records after writing the file
(checkout) are re-taken after one reading when the index is saved.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterable
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from mgit.errors import CorruptObjectError
from mgit.graph.snapshot import Entry, Snapshot
from mgit.worktree import clock
from mgit.worktree.clock import Reading

SCHEMA = "mgit.index/1"
# An index with sparse projections: mgit versions that predate them refuse it instead of
# reading a sparse file as the whole file (and committing it without the tensors left out).
SPARSE_SCHEMA = "mgit.index/2"
# Entries without a marker time (recorded by mgit before the filesystem clock, or of a file on
# another filesystem than .mgit/): trusted when 2 s older than our own clock at the record.
RACY_NS = 2_000_000_000  # 2 s: covers the coarsest filesystem timestamps (FAT, some network mounts)


@dataclass(frozen=True)
class StatKey:
    size: int
    mtime_ns: int
    ctime_ns: int
    ino: int

    @classmethod
    def of(cls, st: os.stat_result) -> StatKey:
        return cls(st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino)


@dataclass(frozen=True)
class IndexEntry:
    entry: Entry
    stat: StatKey | None = None  # working file as last seen matching ``entry``
    recorded_ns: int = 0
    skip_worktree: bool = False  # tracked but deliberately absent from the working tree
    stats: str | None = None  # blob of relative chunk statistics computed when staged
    projection: str | None = None  # sparse checkout: file tree of what the working file holds
    marker_ns: int | None = None  # the filesystem's clock read before ``stat`` was taken (clock.py)

    @property
    def worktree(self) -> Entry:
        """What the working file holds (its projection in a sparse checkout), which the stat
        cache vouches for; ``entry`` is what the next commit holds."""
        return Entry("safetensors", self.projection) if self.projection else self.entry

    def matches(self, st: os.stat_result) -> bool:
        """True when the working file is certainly unchanged since it was recorded."""
        if self.stat is None or StatKey.of(st) != self.stat:
            return False
        if self.marker_ns is not None:  # any change since the stat is stamped marker_ns or later
            return self.stat.mtime_ns < self.marker_ns and self.stat.ctime_ns < self.marker_ns
        return self.stat.mtime_ns < self.recorded_ns - RACY_NS

    def with_stat(self, st: os.stat_result | None, since: Reading | None = None) -> IndexEntry:
        """This entry with the working file's stat ``st``, taken after the clock ``since`` was
        read (None: no reading; ``Index.refresh`` leaves such a stat for ``Index.settle``)."""
        key = StatKey.of(st) if st is not None else None
        marker = since.ns if since is not None and st is not None and st.st_dev == since.dev else None
        return IndexEntry(self.entry, key, time.time_ns(), False, self.stats, self.projection, marker)


def _oid_or_none(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 40 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("projection is not a git id")
    return value


def _ns_or_none(value: object) -> int | None:
    if value is None:
        return None
    if not isinstance(value, int) or isinstance(value, bool):
        raise ValueError("marker_ns is not an integer")
    return value


class Index:
    def __init__(self, path: Path, entries: dict[str, IndexEntry] | None = None):
        self.path = path  # <root>/.mgit/mgit-index.json
        self.entries: dict[str, IndexEntry] = entries or {}
        self.unsettled: set[str] = set()  # paths whose stat was recorded without a clock reading

    @classmethod
    def load(cls, path: Path) -> Index:
        if not path.exists():
            return cls(path)
        try:
            obj = json.loads(path.read_text("utf-8"))
            if obj.get("schema") not in (SCHEMA, SPARSE_SCHEMA):
                raise ValueError
            entries = {}
            for rel, e in obj["entries"].items():
                stat = StatKey(**e["stat"]) if e.get("stat") else None
                entries[rel] = IndexEntry(
                    Entry(e["kind"], e["oid"], e["mode"]),
                    stat,
                    e.get("recorded_ns", 0),
                    e.get("skip_worktree", False),
                    e.get("stats"),
                    _oid_or_none(e.get("projection")),
                    _ns_or_none(e.get("marker_ns")),
                )
        except (ValueError, KeyError, TypeError):
            raise CorruptObjectError(
                f"the index {path} is damaged; delete it and run `mgit checkout --force HEAD` to rebuild it"
            ) from None
        return cls(path, entries)

    def save(self) -> None:
        self.settle()
        entries = {}
        for rel in sorted(self.entries):
            e = self.entries[rel]
            entries[rel] = {
                "kind": e.entry.kind,
                "oid": e.entry.oid,
                "mode": e.entry.mode,
                "stat": asdict(e.stat) if e.stat else None,
                "recorded_ns": e.recorded_ns,
                "skip_worktree": e.skip_worktree,
                "stats": e.stats,
            }
            if e.projection:
                entries[rel]["projection"] = e.projection
            if e.marker_ns is not None:
                entries[rel]["marker_ns"] = e.marker_ns
        schema = SPARSE_SCHEMA if any(e.projection for e in self.entries.values()) else SCHEMA
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_text(json.dumps({"schema": schema, "entries": entries}, indent=0), "utf-8")
            os.replace(tmp, self.path)
        except OSError as exc:  # a full disk: leave no half-written temporary behind, name the index
            tmp.unlink(missing_ok=True)
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.path)) from None

    def snapshot(self) -> Snapshot:
        return {rel: e.entry for rel, e in self.entries.items()}

    def set(
        self,
        rel: str,
        entry: Entry,
        st: os.stat_result | None,
        stats: str | None = None,
        projection: str | None = None,
        since: Reading | None = None,
    ) -> None:
        """Stage ``entry`` at ``rel``; ``st`` is the working file's stat when it holds ``entry``
        (or ``projection``, in a sparse checkout), taken after the clock ``since`` was read
        and before the content was last read; without ``since`` (the stat of a file just
        written) the stat is re-taken after a reading when the index is saved."""
        self.refresh(rel, IndexEntry(entry, stats=stats, projection=projection), st, since)

    def refresh(self, rel: str, ie: IndexEntry, st: os.stat_result | None, since: Reading | None = None) -> None:
        """Record ``st`` as the stat of ``rel``'s working file holding ``ie`` (as ``set``)."""
        self.entries[rel] = fresh = ie.with_stat(st, since)
        if fresh.stat is not None and fresh.marker_ns is None:
            self.unsettled.add(rel)
        else:
            self.unsettled.discard(rel)

    def read_clock(self, seen: Iterable[os.stat_result] = ()) -> Reading | None:
        """The filesystem's clock, read by touching the marker beside the index (clock.py):
        past the timestamps of the files ``seen``, where waiting costs less than hashing them again."""
        return clock.read_past(self.path.parent, [(max(st.st_mtime_ns, st.st_ctime_ns), st.st_size) for st in seen])

    def settle(self) -> None:
        """Give the stats recorded without a clock reading one: read the filesystem's clock
        (waiting for it to tick past the files' timestamps when that costs less than
        re-hashing them), then stat each file again; a file still as recorded gets the
        reading, one that changed since keeps its old stat (so it is re-hashed)."""
        todo = {rel: self.entries[rel] for rel in self.unsettled if rel in self.entries}
        self.unsettled = set()
        todo = {rel: ie for rel, ie in todo.items() if ie.stat is not None and ie.marker_ns is None}
        if not todo:
            return
        written = [(max(ie.stat.mtime_ns, ie.stat.ctime_ns), ie.stat.size) for ie in todo.values() if ie.stat]
        reading = clock.read_past(self.path.parent, written)  # before the stats compared below
        if reading is None:
            return
        root = self.path.parent.parent
        for rel, ie in todo.items():
            try:
                st = os.stat(root / rel)
            except OSError:
                continue
            if StatKey.of(st) == ie.stat and st.st_dev == reading.dev:
                self.entries[rel] = replace(ie, marker_ns=reading.ns)

    @classmethod
    def from_snapshot(cls, path: Path, snap: Snapshot) -> Index:
        return cls(path, {rel: IndexEntry(e) for rel, e in snap.items()})
