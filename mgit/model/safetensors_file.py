"""Parse and validate a safetensors header, keeping its exact bytes.

We keep the header bytes verbatim (length prefix, JSON as written, padding) so the
file can be rebuilt byte-for-byte; the parsed form says where each tensor's bytes are.
Validation follows the safetensors spec: tensors must tile the data area exactly.
"""

from __future__ import annotations

import json
import math
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

from mgit.errors import BadInputError
from mgit.model.dtypes import DType, lookup

MAX_HEADER_BYTES = 100_000_000  # the limit safetensors itself enforces
METADATA_KEY = "__metadata__"
# A valid header nests 3 deep ({name: {"shape": [...]}}); anything far deeper is damage or an
# attack, refused before json.loads (whose recursion would raise RecursionError).
MAX_HEADER_DEPTH = 32
_ESCAPE = re.compile(r"\\.", re.DOTALL)  # a backslash and the character it escapes
_STRING = re.compile(r'"[^"]*"')  # once escapes are gone, a string ends at the next quote
_OPEN, _CLOSE = b"{[", b"}]"


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a file: where its bytes are, relative to the data area."""

    name: str
    dtype: DType
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin


@dataclass(frozen=True)
class SafetensorsLayout:
    """A parsed header: the verbatim header bytes and the tensors in data order."""

    header: bytes
    tensors: tuple[TensorInfo, ...]
    metadata: dict[str, str] | None

    @property
    def data_start(self) -> int:
        return len(self.header)

    @property
    def file_size(self) -> int:
        return self.data_start + (self.tensors[-1].end if self.tensors else 0)

    def by_name(self) -> dict[str, TensorInfo]:
        return {t.name: t for t in self.tensors}


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    seen: dict[str, object] = {}
    for key, value in pairs:
        if key in seen:
            raise ValueError(f"duplicate key {key!r}")
        seen[key] = value
    return seen


def _is_utf8(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def header_length(prefix: bytes, file_size: int, source: str) -> int:
    """Validate the 8-byte length prefix against the file size."""
    if len(prefix) < 8 or file_size < 8:
        raise BadInputError(f"{source}: truncated safetensors file (shorter than the 8-byte header length)")
    n: int
    (n,) = struct.unpack("<Q", prefix[:8])
    if n > MAX_HEADER_BYTES:
        raise BadInputError(f"{source}: safetensors header length {n} exceeds the {MAX_HEADER_BYTES}-byte limit")
    if 8 + n > file_size:
        raise BadInputError(
            f"{source}: safetensors header length {n} goes beyond the end of the file ({file_size} bytes); "
            "the file is truncated or not safetensors"
        )
    return n


def _shape(value: object, name: str, source: str) -> tuple[int, ...]:
    if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in value):
        raise BadInputError(f"{source}: tensor {name!r} has an invalid shape {value!r}")
    return tuple(value)


def _offsets(value: object, name: str, source: str) -> tuple[int, int]:
    if not (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value)
        and value[0] <= value[1]
    ):
        raise BadInputError(f"{source}: tensor {name!r} has invalid data_offsets {value!r}")
    return value[0], value[1]


def json_depth(text: str) -> int:
    """How deep ``text``'s brackets nest outside strings, in linear time (two regex passes
    in C, then a cumulative sum), so a header never reaches the recursive JSON parser deep."""
    import numpy as np  # here, not at the top: reading a stored header must not load numpy for `log`

    bare = _STRING.sub("", _ESCAPE.sub("", text)).encode("utf-8", "surrogatepass")
    codes = np.frombuffer(bare, np.uint8)
    opening, closing = np.frombuffer(_OPEN, np.uint8), np.frombuffer(_CLOSE, np.uint8)
    steps = np.isin(codes, opening).astype(np.int64) - np.isin(codes, closing)
    return int(np.cumsum(steps).max()) if steps.size else 0


def parse_header(header: bytes, file_size: int, source: str) -> SafetensorsLayout:  # noqa: C901 (one check per way a header can lie)
    """Parse the verbatim header bytes (prefix included) of a file of ``file_size`` bytes."""
    n = header_length(header, file_size, source)
    if len(header) != 8 + n:
        raise BadInputError(f"{source}: truncated safetensors header")
    try:
        text = header[8:].decode("utf-8")
    except UnicodeDecodeError:
        raise BadInputError(f"{source}: safetensors header is not valid UTF-8") from None
    depth = json_depth(text)
    if depth > MAX_HEADER_DEPTH:
        raise BadInputError(
            f"{source}: safetensors header nests JSON {depth} levels deep (a header has 3; at most "
            f"{MAX_HEADER_DEPTH} are read): the file is damaged or not safetensors"
        )
    try:
        obj = json.loads(text, object_pairs_hook=_no_duplicates)
    except ValueError as exc:
        what = "has a duplicate tensor name or key" if "duplicate key" in str(exc) else "is not valid JSON"
        raise BadInputError(f"{source}: safetensors header {what} ({exc})") from None
    if not isinstance(obj, dict):
        raise BadInputError(f"{source}: safetensors header is not a JSON object")

    metadata = obj.pop(METADATA_KEY, None)
    if metadata is not None and not (
        isinstance(metadata, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items())
    ):
        raise BadInputError(f"{source}: __metadata__ must map strings to strings")

    tensors = []
    for name, info in obj.items():
        if not _is_utf8(name):
            raise BadInputError(f"{source}: tensor name {name!r} is not valid Unicode (lone surrogate escape)")
        if not isinstance(info, dict):
            raise BadInputError(f"{source}: tensor {name!r} has no dtype/shape/data_offsets object")
        spec = info.get("dtype")
        dtype = lookup(spec) if isinstance(spec, str) else None
        if dtype is None:
            raise BadInputError(f"{source}: tensor {name!r} has unknown dtype {info.get('dtype')!r}")
        shape = _shape(info.get("shape"), name, source)
        begin, end = _offsets(info.get("data_offsets"), name, source)
        nbits = math.prod(shape) * dtype.bits
        if nbits % 8 or nbits // 8 != end - begin:
            raise BadInputError(
                f"{source}: tensor {name!r}: shape {list(shape)} of {dtype.name} needs {nbits / 8:g} bytes "
                f"but data_offsets give {end - begin}"
            )
        tensors.append(TensorInfo(name, dtype, shape, begin, end))

    tensors.sort(key=lambda t: (t.begin, t.end))
    data_len = file_size - len(header)
    position = 0
    for t in tensors:
        if t.begin < position:
            raise BadInputError(f"{source}: tensor {t.name!r} overlaps another tensor's bytes")
        if t.begin > position:
            raise BadInputError(f"{source}: gap in the data before tensor {t.name!r} (offset {position}..{t.begin})")
        if t.end > data_len:
            raise BadInputError(
                f"{source}: tensor {t.name!r} ends at byte {t.end} beyond the data ({data_len} bytes): "
                "offsets out of range or the file is truncated"
            )
        position = t.end
    if position != data_len:
        raise BadInputError(f"{source}: {data_len - position} trailing bytes after the last tensor")
    return SafetensorsLayout(header, tuple(tensors), metadata)


def read_layout(path: Path | str, source: str | None = None) -> SafetensorsLayout:
    """Read and validate the header of a safetensors file on disk."""
    source = source or str(path)
    with open(path, "rb") as f:
        size = os.fstat(f.fileno()).st_size
        prefix = f.read(8)
        n = header_length(prefix, size, source)
        return parse_header(prefix + f.read(n), size, source)


def build_header(tensors: list[tuple[str, DType, tuple[int, ...]]], metadata: dict[str, str] | None) -> bytes:
    """A header for tensors laid out in the given order, padded to 8 bytes like safetensors does."""
    for name, _, _ in tensors:
        if not _is_utf8(name):
            raise BadInputError(f"tensor name {name!r} is not valid Unicode")
    obj: dict[str, object] = {}
    if metadata:
        obj[METADATA_KEY] = metadata
    offset = 0
    for name, dtype, shape in tensors:
        nbytes = math.prod(shape) * dtype.bits // 8
        obj[name] = {"dtype": dtype.name, "shape": list(shape), "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    body = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    body += b" " * (-len(body) % 8)
    return struct.pack("<Q", len(body)) + body
