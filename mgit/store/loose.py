"""Format-1 loose chunks: one file per chunk, read only.

Repositories written before packs existed hold each chunk as ``chunks/<2 hex>/<62 hex>``:
a 16-byte header ``<4sBBxxQ`` (magic ``MGC1``, encoding, byte-group width, raw size), then
the payload (docs/format.md §4.11). mgit reads them, sends them as keyframes and ``gc``
moves them into a pack; it never writes one. So whether a store has any is asked once, by
listing its directory when first needed, and a store without any never looks for a
loose file again (a miss in the packs costs no file-system call).
"""

from __future__ import annotations

import struct
from collections.abc import Iterator
from pathlib import Path

from mgit.errors import DamagedChunkError
from mgit.store.codec import ChunkTooLargeError
from mgit.store.record import NotARecordError, RawBytes, Record, RecordError, decode_verified, has_base

MAGIC = b"MGC1"
HEADER = struct.Struct("<4sBBxxQ")  # magic, encoding, group, pad, raw size


class LooseChunks:
    """The loose chunk files under a chunk store's directory."""

    def __init__(self, root: Path):
        self.root = Path(root)
        self._present: bool | None = None

    def present(self) -> bool:
        """Whether the store has a loose chunk directory at all (listed once)."""
        if self._present is None:
            self._present = self.root.is_dir() and any(
                len(sub.name) == 2 and sub.is_dir() for sub in self.root.iterdir()
            )
        return self._present

    def forget(self) -> None:
        """Ask again next time (after gc moved the loose chunks into a pack)."""
        self._present = None

    def path(self, cid: str) -> Path:
        return self.root / cid[:2] / cid[2:]

    def has(self, cid: str) -> bool:
        return self.present() and self.path(cid).exists()

    def stored_size(self, cid: str) -> int:
        """The file's size (FileNotFoundError when there is none)."""
        return self.path(cid).stat().st_size

    def payload_size(self, cid: str) -> int:
        return self.stored_size(cid) - HEADER.size

    def read(self, cid: str) -> tuple[Record, int]:
        """The chunk as a (keyframe) record, keeping its encoding and grouping, and the file's
        size; FileNotFoundError when there is none, NotARecordError for a file that is not one."""
        data = self.path(cid).read_bytes()
        try:
            magic, encoding, group, raw_size = HEADER.unpack_from(data)
        except struct.error:
            raise NotARecordError("too short for a loose chunk") from None
        if magic != MAGIC or has_base(encoding):
            raise NotARecordError("not a loose chunk")
        return Record(cid, encoding, group, 0, raw_size, data[HEADER.size :]), len(data)

    def decoded(self, cid: str, out: bytearray | memoryview | None = None) -> tuple[RawBytes, int]:
        """The chunk's raw bytes, checked against its id (into ``out``, as decode_verified), and
        the file's size; DamagedChunkError when there is none or it is not this chunk."""
        why = "is missing from the store"
        try:
            if self.present():
                rec, stored = self.read(cid)
                return decode_verified(rec, None, out), stored
        except FileNotFoundError:
            pass
        except (RecordError, ChunkTooLargeError):
            why = "is corrupt (fails verification)"
        raise DamagedChunkError(cid, f"{why}; run `mgit fsck`")

    def ids(self) -> Iterator[str]:
        """Every loose chunk's id, in order."""
        if not self.present():
            return
        for sub in sorted(self.root.iterdir()):
            if len(sub.name) == 2 and sub.is_dir():
                for f in sorted(sub.iterdir()):
                    if len(f.name) == 62 and not f.name.startswith("."):
                        yield sub.name + f.name
