"""One tensor's merge inputs as the store holds them: the base (whole, or just the chunks a merge
computes from) and each expert as the base's bytes with its differing chunks read over them;
expert chunks stored as deltas against a base chunk in memory are decoded from it."""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, cast

import numpy as np

from mgit.errors import CorruptObjectError, chunks_of
from mgit.merge.carry import delta_chunks
from mgit.merge.execution import Execution
from mgit.merge.plan import TensorPlan
from mgit.merge.sketch.use import Delta
from mgit.model.dtypes import DType, lookup
from mgit.model.manifest import TensorManifest
from mgit.model.stats import bf16_bits, to_float32
from mgit.model.torch_io import tensor_from_bytes
from mgit.parallel import ordered_map
from mgit.store.chunkstore import ChunkStore, ReadCounters

if TYPE_CHECKING:
    import torch

Scratch = Callable[[int, int], memoryview]  # (slot, size) -> the calling thread's reusable buffer


def chunk_starts(m: TensorManifest) -> list[int]:
    """Byte offsets of each chunk of a tensor within it, and its end."""
    return m.offsets()


def read_into(
    store: ChunkStore,
    pool: ThreadPoolExecutor | None,
    m: TensorManifest,
    indexes: list[int],
    buf: bytearray,
    counters: ReadCounters,
    base: tuple[TensorManifest, bytearray, set[int]] | None = None,
) -> None:
    """Read the chunks at ``indexes`` of ``m`` into their places in ``buf`` (on the pool, or
    here without one). With ``base`` (the base tensor's manifest, its bytes in memory and the
    indexes of the chunks read into them), expert chunks stored as deltas against one of those
    base chunks are decoded from those bytes."""
    starts = chunk_starts(m)
    known = None
    if base is not None:
        base_manifest, base_bytes, held = base
        base_starts = chunk_starts(base_manifest)
        where = {c.id: k for k, c in enumerate(base_manifest.chunks) if k in held}
        view = memoryview(base_bytes)

        def known(cid: str) -> memoryview | None:
            k = where.get(cid)
            return None if k is None else view[base_starts[k] : base_starts[k + 1]]

    whole = memoryview(buf)

    def read(i: int) -> None:  # decoded in place: no fresh buffer, no copy
        store.get(m.chunks[i].id, known=known, counters=counters, out=whole[starts[i] : starts[i + 1]])

    for _ in ordered_map(pool, read, indexes) if pool is not None else map(read, indexes):
        pass


class TensorInputs:
    """One tensor's inputs as the store holds them: the base whole (when read), experts on demand.
    Its reads name the tensor in a damaged chunk's error (``owner``)."""

    def __init__(self, tp: TensorPlan, store: ChunkStore, pool: ThreadPoolExecutor, run: Execution):
        self.tp, self.store, self.pool, self.run = tp, store, pool, run
        self.owner = tp.owner
        self.base: bytearray | None = None
        self.held: set[int] = set()  # indexes of the base chunks read into ``base``
        self._deltas: dict[int, Delta] = {}
        self._deltas_lock = threading.Lock()

    def prefetch(self, computed: set[int]) -> None:
        """Ask for the tensor's planned chunks (base chunks it computes from, chosen expert chunks)
        to be read in the background: their disk reads overlap the merging of the first ones."""
        tp = self.tp
        ids = [tp.base.chunks[i].id for i in sorted(computed)]
        ids += [tp.experts[k].chunks[i].id for k, reads in enumerate(tp.reads) for i in reads]
        self.store.prefetch(ids)

    def sketched(self, k: int) -> Delta:
        """Expert k's sketched delta, from the prefix of its sketch's levels the plan chose, read
        once (whichever pool thread asks first) and counted as expert reads."""
        use = self.tp.sketch(k)
        assert use is not None
        with self._deltas_lock, chunks_of(self.owner):
            if k not in self._deltas:
                costs = ReadCounters()
                arrays = []
                for level in use.blocks:
                    parts = []
                    for m in level:
                        buf = bytearray(m.nbytes)
                        read_into(self.store, None, m, list(range(len(m.chunks))), buf, costs)
                        parts.append(_floats(buf, m.dtype).reshape(m.shape))
                    arrays.append(parts)
                self.run.count(ReadCounters(), costs, 0)
                try:
                    self._deltas[k] = use.reconstruction(arrays)
                except ValueError as e:
                    raise CorruptObjectError(f"the sketch of {self.owner}: {e}; run `mgit fsck`") from None
            return self._deltas[k]

    def sketched_bytes(self, k: int, base: bytes | memoryview, start: int, out: memoryview) -> None:
        """Expert k's elements ``start`` on (as many as the base's chunk ``base`` holds) from its
        sketch, into ``out``: the base's plus the sketched delta, in the base's dtype (F64 kept
        in float64; the others through float32, rounded to nearest as a cast rounds)."""
        dtype = _dtype(self.tp.base.dtype)
        delta = self.sketched(k)
        if dtype.name == "F64":
            values = np.frombuffer(base, "<f8")
            merged = values + delta.elements(start, start + values.size)
        else:
            values = to_float32(base, dtype)
            merged = values + delta.elements(start, start + values.size)
        result = bf16_bits(merged) if dtype.name == "BF16" else merged.astype(dtype.numpy)
        np.frombuffer(out, np.uint8)[:] = result.view(np.uint8)

    def read_base(self, only: set[int] | None = None) -> torch.Tensor:
        """The base tensor; with ``only``, just those chunks are read and the others are zeros
        (where every expert equals the base too, its delta is exactly 0 either way)."""
        tp = self.tp
        self.base = bytearray(tp.base.nbytes)
        indexes = [i for i in range(len(tp.base.chunks)) if only is None or i in only]
        self.held = set(indexes)
        costs = ReadCounters()
        with chunks_of(self.owner):
            read_into(self.store, self.pool, tp.base, indexes, self.base, costs)
        self.run.count(costs, ReadCounters(), 0)
        return tensor_from_bytes(self.base, tp.base.dtype, tp.base.shape)

    def delta(self, k: int, work: torch.dtype, only: set[int], scratch: Scratch, use_pool: bool = True) -> torch.Tensor:
        """Expert k's delta from the base in the working dtype, what ``expert(k) - read_base(only)``
        gives, made chunk by chunk (those of :func:`delta_chunks`; elsewhere it is 0): neither
        tensor is held whole, at the price of decoding the base's chunks once per expert.
        ``scratch(slot, size)``: the calling thread's reusable buffers."""
        import torch

        tp = self.tp
        assert tp.sketch(k) is None  # a sketched expert is made over the whole base
        dtype, starts, itemsize = tp.base.dtype, chunk_starts(tp.base), _dtype(tp.base.dtype).bits // 8
        differs = set(tp.reads[k])
        flat = torch.zeros(tp.base.nbytes // itemsize, dtype=work)
        base_costs, expert_costs = ReadCounters(), ReadCounters()

        def one(i: int) -> None:
            size = starts[i + 1] - starts[i]
            base_id = tp.base.chunks[i].id
            base_raw = self.store.get(base_id, counters=base_costs, out=scratch(0, size))
            expert_raw = base_raw
            if i in differs:
                known = lambda cid: base_raw if cid == base_id else None  # noqa: E731
                expert_id = tp.experts[k].chunks[i].id
                expert_raw = self.store.get(expert_id, known=known, counters=expert_costs, out=scratch(1, size))
            base_t = tensor_from_bytes(cast(bytearray, base_raw), dtype, (-1,)).to(work)
            expert_t = tensor_from_bytes(cast(bytearray, expert_raw), dtype, (-1,)).to(work)
            at = starts[i] // itemsize
            torch.sub(expert_t, base_t, out=flat[at : at + base_t.numel()])

        chunks = delta_chunks(tp, k, only)
        with chunks_of(self.owner):
            for _ in ordered_map(self.pool, one, chunks) if use_pool else map(one, chunks):
                pass
        self.run.count(base_costs, expert_costs, len(differs))
        return flat.reshape(tp.base.shape)

    def expert(self, k: int, base_t: torch.Tensor, use_pool: bool = True) -> torch.Tensor:
        """Expert k whole: the base's bytes with its differing chunks read over them."""
        tp = self.tp
        use = tp.sketch(k)
        if use is not None:  # the sketch over the chunks it stands for; elsewhere the expert is the base
            assert self.base is not None
            buf, starts = bytearray(self.base), chunk_starts(tp.base)
            size = _dtype(tp.base.dtype).bits // 8
            for i in use.chunks:
                part = memoryview(buf)[starts[i] : starts[i + 1]]
                self.sketched_bytes(k, bytes(part), starts[i] // size, part)
            return tensor_from_bytes(buf, tp.base.dtype, tp.base.shape)
        if not tp.reads[k]:
            return base_t
        assert self.base is not None
        buf, costs = bytearray(self.base), ReadCounters()
        pool = self.pool if use_pool else None
        with chunks_of(self.owner):
            read_into(self.store, pool, tp.experts[k], tp.reads[k], buf, costs, (tp.base, self.base, self.held))
        self.run.count(ReadCounters(), costs, len(tp.reads[k]))
        return tensor_from_bytes(buf, tp.base.dtype, tp.base.shape)


def _dtype(name: str) -> DType:
    """The DType of a floating dtype a merge reads (known: its plan was made from it)."""
    dtype = lookup(name)
    assert dtype is not None
    return dtype


def _floats(buf: bytearray, name: str) -> np.ndarray:
    """A stored factor block's values as float32."""
    return to_float32(buf, _dtype(name))
