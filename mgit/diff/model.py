"""Tensor-level diff of two model versions.

Tensors are matched by (model directory, tensor name) across all shards, so a tensor
that moved to another shard file is "moved", not removed + added. Unchanged tensors are
recognised by chunk ids alone; statistics of changed tensors stream over the changed
chunk pairs only, one pair in memory at a time.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from mgit.diff.numeric import Accumulator, numeric
from mgit.model.dtypes import DType, lookup
from mgit.store.record import RawBytes

# (chunk index, optionally: id → raw bytes of a delta base the caller holds) → the chunk's raw bytes
ReadChunk = Callable[..., RawBytes]


@dataclass(frozen=True)
class TensorSide:
    """One version of a tensor: where it is, what it is, and how to read its chunks."""

    file: str
    dtype: str
    shape: tuple[int, ...]
    chunk_ids: tuple[str, ...]
    chunk_sizes: tuple[int, ...]
    chunk_l2: tuple[float | None, ...]  # per chunk, where known (manifests know it)
    read: ReadChunk
    # chunk index → the id of the chunk it is stored as a delta of (None: stored whole, or a file)
    delta_base: Callable[[int], str | None] = lambda i: None

    @property
    def nbytes(self) -> int:
        return sum(self.chunk_sizes)


@dataclass
class TensorDiff:
    model: str
    name: str
    status: str  # added | removed | changed | moved | shape-changed | dtype-changed | unchanged
    file_a: str | None
    file_b: str | None
    dtype_a: str | None = None
    dtype_b: str | None = None
    shape_a: tuple[int, ...] | None = None
    shape_b: tuple[int, ...] | None = None
    chunks_changed: int = 0
    chunks_total: int = 0
    bytes_changed: int = 0
    delta_norm: float | None = None
    norm_a: float | None = None
    norm_b: float | None = None
    relative_change: float | None = None
    cosine: float | None = None
    max_abs_delta: float | None = None

    @property
    def changed(self) -> bool:
        return self.status != "unchanged"


@dataclass
class FileDiff:
    path: str
    status: str  # added | removed | modified
    kind: str  # safetensors | file
    tensors_changed: int = 0  # content, shape or dtype changed (moved or not)
    tensors_added: int = 0
    tensors_removed: int = 0
    tensors_moved: int = 0  # moved in or out of this file, content unchanged
    chunks_changed: int = 0
    bytes_changed: int = 0
    text: str | None = None  # unified diff of a small text file


@dataclass
class ModelDiff:
    a: str
    b: str
    tensors: list[TensorDiff] = field(default_factory=list)
    files: list[FileDiff] = field(default_factory=list)
    numeric: bool = True

    @property
    def changed(self) -> list[TensorDiff]:
        return [t for t in self.tensors if t.changed]


def compare_tensor(model: str, name: str, a: TensorSide | None, b: TensorSide | None, with_numbers: bool) -> TensorDiff:  # noqa: C901 (one case per way two tensors can differ)
    if a is None or b is None:
        side = b or a
        assert side is not None  # compare_models asks for the tensors of either side: one side holds it
        return TensorDiff(
            model,
            name,
            "added" if a is None else "removed",
            a.file if a else None,
            b.file if b else None,
            dtype_a=a.dtype if a else None,
            dtype_b=b.dtype if b else None,
            shape_a=a.shape if a else None,
            shape_b=b.shape if b else None,
            chunks_total=len(side.chunk_ids),
            chunks_changed=len(side.chunk_ids),
            bytes_changed=side.nbytes,
        )
    diff = TensorDiff(
        model, name, "unchanged", a.file, b.file, a.dtype, b.dtype, a.shape, b.shape, chunks_total=len(b.chunk_ids)
    )
    if a.shape != b.shape:
        diff.status = "dtype-changed" if a.dtype != b.dtype else "shape-changed"
        diff.chunks_changed, diff.bytes_changed = len(b.chunk_ids), b.nbytes
        return diff
    if a.dtype != b.dtype:
        diff.status = "dtype-changed"
        diff.chunks_changed, diff.bytes_changed = len(b.chunk_ids), b.nbytes
        da, db = lookup(a.dtype), lookup(b.dtype)
        if with_numbers and da is not None and db is not None and _comparable(da, db):
            acc = Accumulator()
            for x, y in _aligned(a, b, da.group, db.group):  # element by element, both widened to float64
                acc.add_pair(x, y, da, db)
            _set_numbers(diff, acc)
        return diff
    same_chunking = a.chunk_sizes == b.chunk_sizes
    changed = [i for i, (x, y) in enumerate(zip(a.chunk_ids, b.chunk_ids, strict=False)) if x != y or not same_chunking]
    diff.chunks_changed = len(changed)
    diff.bytes_changed = sum(b.chunk_sizes[i] for i in changed)
    if changed:
        diff.status = "changed"
    elif a.file != b.file:
        diff.status = "moved"
    dtype = lookup(a.dtype)
    if not with_numbers or dtype is None or not numeric(dtype):
        return diff
    acc = Accumulator()
    if not same_chunking:  # written by a different chunking rule: stream aligned windows
        for x, y in _aligned(a, b, dtype.group, dtype.group):
            acc.add_pair(x, y, dtype)
    else:
        changed_set = set(changed)
        for i, l2 in enumerate(a.chunk_l2):
            if i in changed_set:
                acc.add_pair(*_read_pair(a, b, i), dtype)
            elif l2 is not None:
                acc.add_identical(l2)
            else:  # no recorded norm (never so for stored manifests): measure it
                raw = a.read(i)
                acc.add_pair(raw, raw, dtype)
    _set_numbers(diff, acc)
    return diff


def _set_numbers(diff: TensorDiff, acc: Accumulator) -> None:
    diff.delta_norm = acc.delta_norm
    diff.norm_a, diff.norm_b = acc.a_sq**0.5, acc.b_sq**0.5
    diff.relative_change, diff.cosine, diff.max_abs_delta = acc.relative_change, acc.cosine, acc.max_abs_delta


def _comparable(a: DType, b: DType) -> bool:
    """Whether two dtypes' elements pair up as numbers: both readable as numbers and both
    real (a complex element widens to two floats)."""
    return numeric(a) and numeric(b) and "C" not in (a.name[0], b.name[0])


def _read_pair(a: TensorSide, b: TensorSide, i: int) -> tuple[RawBytes, RawBytes]:
    """Chunk i of both sides. When one is stored as a delta of the other (a fine-tune's chunk
    of its parent's), the other is read first and handed over, so it is decoded once."""
    if a.delta_base(i) == b.chunk_ids[i]:
        y = b.read(i)
        return a.read(i, lambda cid: y if cid == b.chunk_ids[i] else None), y
    x = a.read(i)
    return x, b.read(i, lambda cid: x if cid == a.chunk_ids[i] else None)


def _aligned(a: TensorSide, b: TensorSide, item_a: int, item_b: int) -> Iterable[tuple[bytes, bytes]]:
    """Windows of both sides holding the same elements (``item_a`` / ``item_b`` bytes each:
    two dtypes), about one chunk at a time."""
    ia = (a.read(i) for i in range(len(a.chunk_ids)))
    ib = (b.read(i) for i in range(len(b.chunk_ids)))
    buf_a = buf_b = b""
    while True:
        if not buf_a:
            buf_a = bytes(next(ia, b""))
        if not buf_b:
            buf_b = bytes(next(ib, b""))
        n = min(len(buf_a) // item_a, len(buf_b) // item_b)
        if n == 0:
            return
        yield buf_a[: n * item_a], buf_b[: n * item_b]
        buf_a, buf_b = buf_a[n * item_a :], buf_b[n * item_b :]


def compare_models(
    a: dict[tuple[str, str], TensorSide],
    b: dict[tuple[str, str], TensorSide],
    patterns: Iterable[str] = (),
    with_numbers: bool = True,
    pool: ThreadPoolExecutor | None = None,
) -> list[TensorDiff]:
    """Every tensor of either side (matching the fnmatch patterns, if any).

    Tensors are compared in parallel, each streaming its own chunk pairs, so at most
    one chunk pair per worker is in memory.
    """
    pats = list(patterns)
    keys = sorted(set(a) | set(b))
    if pats:
        keys = [k for k in keys if any(fnmatch.fnmatchcase(k[1], p) for p in pats)]

    def one(key: tuple[str, str]) -> TensorDiff:
        return compare_tensor(key[0], key[1], a.get(key), b.get(key), with_numbers)

    return list(pool.map(one, keys)) if pool is not None else [one(k) for k in keys]
