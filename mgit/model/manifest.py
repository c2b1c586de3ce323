"""Manifests: content-only descriptions of a tensor or a large file, stored as git blobs.

A manifest says what the bytes *are* (dtype, shape, chunk ids, content statistics),
never how they are stored or what they derive from, so identical tensors anywhere
produce the identical blob and git dedups and tree-diffs them for free.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from mgit.errors import CorruptObjectError
from mgit.model.chunking import CDC_AVG, CDC_MAX, CDC_METHOD, CDC_MIN, CDC_NORMALIZATION

TENSOR_SCHEMA = "mgit.tensor/1"
FILE_SCHEMA = "mgit.file/2"  # content-defined chunks (format 4)
FIXED_FILE_SCHEMA = "mgit.file/1"  # fixed-size chunks (formats 1 to 3), still read
# How mgit.file/2 files are cut (docs/format.md §5), recorded in each manifest: readers need none of
# it (a manifest lists every chunk's size), but it tells a later writer how the file was cut.
CHUNKING = {"method": CDC_METHOD, "min": CDC_MIN, "avg": CDC_AVG, "max": CDC_MAX, "normalization": CDC_NORMALIZATION}


@dataclass(frozen=True)
class ChunkRef:
    """One chunk of a tensor: BLAKE3 id (hex), raw size, L2 norm, max |x|."""

    id: str
    size: int
    l2: float | None = None
    max_abs: float | None = None


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def _loads(data: bytes, *schemas: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or obj.get("schema") not in schemas:
        raise CorruptObjectError(f"a stored manifest is not a valid {schemas[0]} object; run `mgit fsck`")
    return obj


@dataclass(frozen=True)
class TensorManifest:
    dtype: str
    shape: tuple[int, ...]
    chunk_size: int
    chunks: tuple[ChunkRef, ...]

    @property
    def nbytes(self) -> int:
        return sum(c.size for c in self.chunks)

    @property
    def chunk_ids(self) -> tuple[str, ...]:
        return tuple(c.id for c in self.chunks)

    def to_bytes(self) -> bytes:
        return _dumps(
            {
                "schema": TENSOR_SCHEMA,
                "dtype": self.dtype,
                "shape": list(self.shape),
                "chunk_size": self.chunk_size,
                "chunks": [[c.id, c.size, c.l2, c.max_abs] for c in self.chunks],
            }
        )

    @classmethod
    def from_bytes(cls, data: bytes) -> TensorManifest:
        obj = _loads(data, TENSOR_SCHEMA)
        return cls(
            dtype=obj["dtype"],
            shape=tuple(obj["shape"]),
            chunk_size=obj["chunk_size"],
            chunks=tuple(ChunkRef(*c) for c in obj["chunks"]),
        )


@dataclass(frozen=True)
class FileManifest:
    """A large non-tensor file: its chunks in order, cut where its content says
    (``mgit.file/2``), or every ``chunk_size`` bytes by mgit before format 4 (``mgit.file/1``)."""

    size: int
    chunks: tuple[ChunkRef, ...]
    chunk_size: int | None = None  # the fixed size of an mgit.file/1 manifest's chunks

    def to_bytes(self) -> bytes:
        body: dict[str, Any] = {"size": self.size, "chunks": [[c.id, c.size] for c in self.chunks]}
        if self.chunk_size is None:
            return _dumps({"schema": FILE_SCHEMA, "chunking": CHUNKING, **body})
        return _dumps({"schema": FIXED_FILE_SCHEMA, "chunk_size": self.chunk_size, **body})

    @classmethod
    def from_bytes(cls, data: bytes) -> FileManifest:
        obj = _loads(data, FILE_SCHEMA, FIXED_FILE_SCHEMA)
        chunks = tuple(ChunkRef(c[0], c[1]) for c in obj["chunks"])
        return cls(obj["size"], chunks, obj["chunk_size"] if obj["schema"] == FIXED_FILE_SCHEMA else None)
