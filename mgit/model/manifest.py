"""Manifests: content-only descriptions of a tensor or a large file, stored as git blobs.

A manifest says what the bytes *are* (dtype, shape, chunk ids, content statistics),
never how they are stored or what they derive from, so identical tensors anywhere
produce the identical blob and git dedups and tree-diffs them for free.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import accumulate
from typing import Any

from mgit.errors import CorruptObjectError
from mgit.model.chunking import CDC_AVG, CDC_MAX, CDC_METHOD, CDC_MIN, CDC_NORMALIZATION
from mgit.store.limits import MAX_CHUNK_BYTES

TENSOR_SCHEMA = "mgit.tensor/1"
FILE_SCHEMA = "mgit.file/2"  # content-defined chunks (format 4)
FIXED_FILE_SCHEMA = "mgit.file/1"  # fixed-size chunks (formats 1 to 3), still read
# How mgit.file/2 files are cut (docs/format.md §5), recorded in each manifest: readers need none of
# it (a manifest lists every chunk's size), but it tells a later writer how the file was cut.
CHUNKING = {"method": CDC_METHOD, "min": CDC_MIN, "avg": CDC_AVG, "max": CDC_MAX, "normalization": CDC_NORMALIZATION}
CHUNK_ID = re.compile(r"[0-9a-f]{64}")  # a BLAKE3 id in hex (store/record.chunk_id)


@dataclass(frozen=True)
class ChunkRef:
    """One chunk of a tensor: BLAKE3 id (hex), raw size, L2 norm, max |x|."""

    id: str
    size: int
    l2: float | None = None
    max_abs: float | None = None


def _dumps(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode("utf-8")


def chunk_offsets(sizes: Iterable[int], start: int = 0) -> list[int]:
    """Where each of a run of chunks begins when they lie end to end from ``start``, then where
    the last one ends (one more entry than ``sizes``)."""
    return list(accumulate(sizes, initial=start))


class _Invalid(ValueError):
    """Why a manifest's JSON is not a valid manifest (turned into a CorruptObjectError naming it)."""


def _loads(data: bytes, what: str, *schemas: str) -> dict[str, Any]:
    try:
        obj = json.loads(data)
    except ValueError:
        obj = None
    if not isinstance(obj, dict) or obj.get("schema") not in schemas:
        raise CorruptObjectError(f"{what} is not a valid {schemas[0]} object; run `mgit fsck`")
    return obj


def _corrupt(what: str, schema: str, why: str) -> CorruptObjectError:
    return CorruptObjectError(f"{what} is not a valid {schema} object: {why}; run `mgit fsck`")


def _field(obj: dict[str, Any], key: str, kind: type) -> Any:
    """``obj[key]``, of type ``kind`` (a bool is no number here)."""
    value = obj.get(key)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise _Invalid(f"{key!r} is missing or of the wrong type")
    return value


def _is_int(value: Any, low: int, high: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and low <= value <= high


def _chunk_refs(entries: Any, width: int) -> tuple[ChunkRef, ...]:
    """The ``chunks`` list of a manifest: ``width`` items each, an id, a size from 1 to the format's
    largest chunk, then (tensors) two statistics, numbers or null."""
    if not isinstance(entries, list):
        raise _Invalid("'chunks' is missing or not a list")
    refs = []
    for k, c in enumerate(entries):
        if not isinstance(c, list) or len(c) != width:
            raise _Invalid(f"chunk {k} is not a list of {width} items")
        if not isinstance(c[0], str) or not CHUNK_ID.fullmatch(c[0]):
            raise _Invalid(f"chunk {k} has no valid id")
        if not _is_int(c[1], 1, MAX_CHUNK_BYTES):
            raise _Invalid(f"chunk {k} has size {c[1]!r} (not 1 to {MAX_CHUNK_BYTES})")
        if any(s is not None and (isinstance(s, bool) or not isinstance(s, int | float)) for s in c[2:]):
            raise _Invalid(f"chunk {k} has a statistic that is not a number")
        refs.append(ChunkRef(*c))
    return tuple(refs)


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

    def offsets(self, start: int = 0) -> list[int]:
        """Each chunk's offset when the tensor's bytes begin at ``start``, then the tensor's end."""
        return chunk_offsets((c.size for c in self.chunks), start)

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
    def from_bytes(cls, data: bytes, what: str = "a stored manifest") -> TensorManifest:
        """The manifest ``data`` holds, its fields checked (CorruptObjectError naming ``what``)."""
        obj = _loads(data, what, TENSOR_SCHEMA)
        try:
            shape = _field(obj, "shape", list)
            if not all(_is_int(n, 0, 2**63) for n in shape):
                raise _Invalid("'shape' is not a list of sizes")
            chunk_size = _field(obj, "chunk_size", int)
            if chunk_size < 1:
                raise _Invalid(f"'chunk_size' is {chunk_size}")
            return cls(_field(obj, "dtype", str), tuple(shape), chunk_size, _chunk_refs(obj.get("chunks"), 4))
        except _Invalid as exc:
            raise _corrupt(what, TENSOR_SCHEMA, str(exc)) from None


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

    def offsets(self) -> list[int]:
        """Each chunk's offset in the file, then the file's end."""
        return chunk_offsets(c.size for c in self.chunks)

    @classmethod
    def from_bytes(cls, data: bytes, what: str = "a stored manifest") -> FileManifest:
        """The manifest ``data`` holds, checked whole: every chunk's id and size (1 to the
        format's largest chunk), and that the sizes add up to the file's (CorruptObjectError
        naming ``what``): every reader lays the file out from these sizes."""
        obj = _loads(data, what, FILE_SCHEMA, FIXED_FILE_SCHEMA)
        try:
            size = _field(obj, "size", int)
            chunks = _chunk_refs(obj.get("chunks"), 2)
            chunk_size = None
            if obj["schema"] == FIXED_FILE_SCHEMA:
                chunk_size = _field(obj, "chunk_size", int)
                if not 1 <= chunk_size <= MAX_CHUNK_BYTES:
                    raise _Invalid(f"'chunk_size' is {chunk_size} (not 1 to {MAX_CHUNK_BYTES})")
            if sum(c.size for c in chunks) != size:
                raise _Invalid(f"its chunks' sizes add up to {sum(c.size for c in chunks)}, not to the file's {size}")
        except _Invalid as exc:
            raise _corrupt(what, str(obj["schema"]), str(exc)) from None
        return cls(size, chunks, chunk_size)
