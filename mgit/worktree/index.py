"""The index: what is staged for the next commit, plus a stat cache of the working tree.

Stored as JSON at ``.mgit/mgit-index.json`` (not git's binary index: our entries are
file trees, not blobs) and replaced atomically. A cached stat is trusted only when the
file's mtime is clearly older than when the stat was recorded ("racy" entries are
re-hashed), so a write landing in the same timestamp tick is never missed.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from mgit.errors import CorruptObjectError
from mgit.graph.snapshot import Entry, Snapshot

SCHEMA = "mgit.index/1"
# An index with sparse projections: mgit versions that predate them refuse it instead of
# reading a sparse file as the whole file (and committing it without the tensors left out).
SPARSE_SCHEMA = "mgit.index/2"
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

    @property
    def worktree(self) -> Entry:
        """What the working file holds (its projection in a sparse checkout), which the stat
        cache vouches for; ``entry`` is what the next commit holds."""
        return Entry("safetensors", self.projection) if self.projection else self.entry

    def matches(self, st: os.stat_result) -> bool:
        """True when the working file is certainly unchanged since it was recorded."""
        return self.stat is not None and StatKey.of(st) == self.stat and self.stat.mtime_ns < self.recorded_ns - RACY_NS

    def with_stat(self, st: os.stat_result | None) -> IndexEntry:
        key = StatKey.of(st) if st is not None else None
        return IndexEntry(self.entry, key, time.time_ns(), False, self.stats, self.projection)


def _oid_or_none(value: object) -> str | None:
    if value is None:
        return None
    if not isinstance(value, str) or len(value) != 40 or any(c not in "0123456789abcdef" for c in value):
        raise ValueError("projection is not a git id")
    return value


class Index:
    def __init__(self, path: Path, entries: dict[str, IndexEntry] | None = None):
        self.path = path
        self.entries: dict[str, IndexEntry] = entries or {}

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
                )
        except (ValueError, KeyError, TypeError):
            raise CorruptObjectError(
                f"the index {path} is damaged; delete it and run `mgit checkout --force HEAD` to rebuild it"
            ) from None
        return cls(path, entries)

    def save(self) -> None:
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
        self, rel: str, entry: Entry, st: os.stat_result | None, stats: str | None = None, projection: str | None = None
    ) -> None:
        """Stage ``entry`` at ``rel``; ``st`` is the working file's stat when it holds ``entry``
        (or ``projection``, in a sparse checkout)."""
        self.entries[rel] = IndexEntry(entry, stats=stats, projection=projection).with_stat(st)

    @classmethod
    def from_snapshot(cls, path: Path, snap: Snapshot) -> Index:
        return cls(path, {rel: IndexEntry(e) for rel, e in snap.items()})
