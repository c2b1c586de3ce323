"""The content-addressed chunk store: chunk id = BLAKE3 of the raw bytes.

Each chunk is one file ``chunks/ab/<id>`` holding a 16-byte header (magic, encoding,
byte-group width, raw size) and the payload. Files appear by atomic rename, so a
killed writer leaves at most a temporary file, never a partial chunk under its id.
Every read is verified against the id.
"""

from __future__ import annotations

import os
import struct
import threading
import uuid
from dataclasses import dataclass
from pathlib import Path

import blake3

from mgit.errors import CorruptObjectError
from mgit.store import codec

MAGIC = b"MGC1"
_HEADER = struct.Struct("<4sBBxxQ")


def chunk_id(raw: bytes | memoryview) -> str:
    return blake3.blake3(raw).hexdigest()


@dataclass
class ReadCounters:
    """What reads cost: chunks read, stored (encoded) bytes, raw bytes."""

    chunks: int = 0
    stored_bytes: int = 0
    raw_bytes: int = 0


class ChunkStore:
    def __init__(self, root: Path):
        self.root = Path(root)
        self.reads = ReadCounters()
        self._lock = threading.Lock()

    def path(self, cid: str) -> Path:
        return self.root / cid[:2] / cid[2:]

    def has(self, cid: str) -> bool:
        return self.path(cid).exists()

    def stored_size(self, cid: str) -> int:
        return self.path(cid).stat().st_size

    def put(self, raw: bytes | memoryview, group: int, cid: str | None = None) -> tuple[str, int]:
        """Store raw bytes; returns (id, bytes newly written to disk: 0 when deduplicated)."""
        cid = cid or chunk_id(raw)
        target = self.path(cid)
        if target.exists():
            return cid, 0
        encoding, payload = codec.encode(raw, group)
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.parent / f".tmp-{cid[:16]}-{uuid.uuid4().hex}"
        try:
            with open(tmp, "wb") as f:
                f.write(_HEADER.pack(MAGIC, encoding, group, len(raw)))
                f.write(payload)
            os.replace(tmp, target)
        except BaseException:
            tmp.unlink(missing_ok=True)
            raise
        return cid, _HEADER.size + len(payload)

    def get(self, cid: str, what: str = "") -> bytes:
        """Read and verify a chunk; ``what`` names the tensor or file for error messages."""
        where = f" of {what}" if what else ""
        try:
            data = self.path(cid).read_bytes()
        except FileNotFoundError:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} is missing from the store; run `mgit fsck`") from None
        try:
            magic, encoding, group, raw_size = _HEADER.unpack_from(data)
        except struct.error:
            magic, encoding, group, raw_size = b"", 0, 0, 0
        if magic == MAGIC and encoding not in codec.ENCODINGS:
            raise CorruptObjectError(
                f"chunk {cid[:12]}{where} uses encoding {encoding}, unknown to this mgit; upgrade mgit"
            )
        try:
            raw = codec.decode(encoding, data[_HEADER.size :], group, raw_size) if magic == MAGIC else None
        except Exception:
            raw = None
        if raw is None or len(raw) != raw_size or chunk_id(raw) != cid:
            raise CorruptObjectError(f"chunk {cid[:12]}{where} is corrupt (fails verification); run `mgit fsck`")
        with self._lock:
            self.reads.chunks += 1
            self.reads.stored_bytes += len(data)
            self.reads.raw_bytes += len(raw)
        return raw
