"""One tensor merged chunk by chunk: the ingestor's job for it (see :mod:`mgit.merge.engine`).

Each output chunk is made where the ingestor reads it: the base's chunk and the experts' chunks
at the same place are read into the calling worker's buffers and merged by the method's array
kernel (torch-free) or its torch kernel; chunks the plan carries are the base's, never read.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TYPE_CHECKING, cast

import numpy as np

from mgit.errors import chunks_of
from mgit.merge.carry import base_chunks_read, carried_chunks, streams_deltas
from mgit.merge.chunk_buffers import ChunkBuffers
from mgit.merge.execution import Execution
from mgit.merge.kernels import Kernels, array_kernel_for, chunk_bits, merge_one
from mgit.merge.methods.base import ArrayKernel
from mgit.merge.plan import TensorPlan
from mgit.merge.request import MergeSetup
from mgit.merge.tensor_inputs import TensorInputs, chunk_starts
from mgit.model.dtypes import DType, lookup
from mgit.model.ingest import TensorJob
from mgit.model.manifest import ChunkRef
from mgit.model.materialize import StagedFile
from mgit.model.torch_io import tensor_from_bytes, torch_dtype
from mgit.parallel import WORKERS
from mgit.store.chunkstore import ChunkStore, ReadCounters
from mgit.store.record import RawBytes

if TYPE_CHECKING:
    import torch

    from mgit.merge.methods.inputs import DeltaAt, Prepared

# Sparsifiers decide on whole deltas, each on one thread, so experts are decided concurrently
# while their scratch fits in DECIDE_MEMORY (per element: see sparsify's *_BYTES_PER_ELEMENT):
# a 65M-element bf16 embedding (~0.5 GB of ranking scratch) is decided one expert at a time,
# which keeps a TIES merge's peak near 1 GB; its 11.5M-element MLP matrices two at a time.
DECIDE_MEMORY = 768 * 2**20
# Elements of a chunk merged at a time: the method's scratch (K deltas and more) stays in the
# caches and below malloc's mmap threshold, instead of fresh, page-faulting buffers per chunk.
SLICE_ELEMENTS = 1 << 19

Held = dict[int, bytes | memoryview]  # chunk index → base bytes, until the ingestor takes them


class ChunkMerge:
    """One tensor merged chunk by chunk, read by the ingestor as a file is (``__call__`` and
    ``will_need``, like :class:`mgit.model.ingest.FileReader`). A chunk goes through the method's
    array kernel when it has one for the tensor (torch-free), else (or when the kernel declines
    the chunk's values) through its torch kernel."""

    def __init__(
        self,
        tp: TensorPlan,
        setup: MergeSetup,
        store: ChunkStore,
        pool: ThreadPoolExecutor,
        run: Execution,
        staged: StagedFile | None,
        kernels: Kernels,
        buffers: ChunkBuffers,
    ):
        self.tp, self.setup, self.store, self.run = tp, setup, store, run
        self.staged, self.kernels, self.buffers = staged, kernels, buffers
        self.inputs = TensorInputs(tp, store, pool, run)
        self.starts = chunk_starts(tp.base)
        self.carried = carried_chunks(tp, setup)
        self.held: Held = {}
        self.index = {start: i for i, start in enumerate(self.starts[:-1])}
        self.exact = [set(r) for r in tp.reads]  # expert chunks read from the store
        self.wanted = [set(tp.computed_from(k)) for k in range(len(tp.reads))]  # ... and those sketches stand for
        self.sketched = [tp.sketch(k) is not None for k in range(len(tp.reads))]
        self.base_index = {c.id: k for k, c in enumerate(tp.base.chunks)}
        self.itemsize = _dtype(tp.base.dtype).bits // 8
        self.prepared = _Once(self._prepare)
        self.kernel: ArrayKernel | None = None

    def job(self) -> tuple[TensorJob, Held]:
        """The ingestor's job, and the base chunks it holds for the ingestor (as delta bases) until
        each is taken (cleared once the job has run). Counts the tensor's chunks, carries the
        base's own into a staged file and, for a method that decides per expert, makes its
        decisions first."""
        tp, setup, carried = self.tp, self.setup, self.carried
        computed_bytes = sum(c.size for i, c in enumerate(tp.base.chunks) if i not in carried)
        self.run.tally(len(tp.base.chunks) - len(carried), len(carried), computed_bytes)
        if self.staged is not None:
            for i in sorted(carried):
                c = tp.base.chunks[i]
                self.staged.carry(tp.name, self.starts[i], c.id, c.size)
        out = _dtype(setup.result_dtype(tp.base.dtype))
        if len(carried) == len(tp.base.chunks):  # nothing to merge: the base's manifest as it is
            return TensorJob(tp.name, out, tp.base.shape, tp.base.nbytes, _unread, carried=self.carried_ref), self.held
        if setup.method.decides_per_expert:  # its decisions read the base and the experts first
            self.inputs.prefetch({i for i in range(len(tp.base.chunks)) if i not in carried})
            self.prepared.get()
        self.kernel = array_kernel_for(tp, setup) if self.kernels.arrays else None
        job = TensorJob(tp.name, out, tp.base.shape, tp.base.nbytes, self, self.parent_bytes, self.carried_ref)
        return job, self.held

    def merged_chunk(self, offset: int, size: int) -> bytes | memoryview:
        """The merged chunk at ``offset``, in this thread's output buffer (staged, counted)."""
        i = self.index[offset]
        base_costs, expert_costs = ReadCounters(), ReadCounters()
        present = self._present(i)
        with chunks_of(self.inputs.owner):
            base_raw = self._base_chunk(i, base_costs)
            raws = [self._expert_chunk(k, i, offset, size, base_raw, slot, expert_costs) for slot, k in present]
        which = None if len(present) == len(self.tp.experts) else [k for _, k in present]
        out = self.buffers.get(1, size)
        if not self._merge_with_kernel(base_raw, raws, which, out):
            self._merge_with_torch(base_raw, raws, which, out, offset // self.itemsize)
        if self.staged is not None:
            self.staged.write(self.tp.name, offset, out)
        self.run.count(base_costs, expert_costs, sum(i in w for w in self.exact))
        if not np.array_equal(np.frombuffer(out, np.uint8), np.frombuffer(base_raw, np.uint8)):
            self.held[i] = _buffer(base_raw)  # the ingestor will want it as the delta base
        return out

    __call__ = merged_chunk  # the ingestor's ReadAt

    def will_need(self, offset: int, size: int) -> None:
        """The chunk's inputs read into the page cache in the background, a window ahead."""
        i, tp = self.index[offset], self.tp
        ids = [] if self._holds_base(i) else [tp.base.chunks[i].id]
        self.store.prefetch(ids + [tp.experts[k].chunks[i].id for k in range(len(tp.experts)) if i in self.exact[k]])

    def parent_bytes(self, i: int, cid: str) -> bytes | memoryview | None:
        """The base chunk the ingestor may store output chunk ``i`` as a delta of, handed over once."""
        return self.held.pop(i, None) if cid == self.tp.base.chunks[i].id else None

    def carried_ref(self, i: int) -> ChunkRef | None:
        """The base's chunk where output chunk ``i`` is carried (the base's own), else None."""
        return self.tp.base.chunks[i] if i in self.carried else None

    # -- one chunk's inputs and merge --------------------------------------------------------

    def _holds_base(self, i: int) -> bool:
        """Whether base chunk ``i`` is in memory already (read whole for the method's decisions)."""
        return self.inputs.base is not None and i in self.inputs.held

    def _present(self, i: int) -> list[tuple[int, int]]:
        """(buffer slot, expert) of the experts in chunk ``i``'s merge: experts equal to the base
        there (unchanged, or left out by a budget) add exactly nothing to a method that skips
        zero deltas, so they are left out of its math."""
        skips = self.setup.method.skips_zero_deltas
        return list(enumerate([k for k in range(len(self.tp.experts)) if not skips or i in self.wanted[k]], start=2))

    def _held_base(self, i: int) -> memoryview:
        assert self.inputs.base is not None
        return memoryview(self.inputs.base)[self.starts[i] : self.starts[i + 1]]

    def _base_chunk(self, i: int, counters: ReadCounters) -> RawBytes:
        if self._holds_base(i):
            return self._held_base(i)
        out = self.buffers.get(0, self.starts[i + 1] - self.starts[i])
        return self.store.get(self.tp.base.chunks[i].id, counters=counters, out=out)

    def _known(self, i: int, base_raw: RawBytes, cid: str) -> RawBytes | None:
        """A delta base the merge holds: chunk ``i`` of the base (``base_raw``), or another base
        chunk in memory."""
        if cid == self.tp.base.chunks[i].id:
            return base_raw
        k = self.base_index.get(cid)
        return self._held_base(k) if k is not None and self._holds_base(k) else None

    def _expert_chunk(
        self, k: int, i: int, offset: int, size: int, base_raw: RawBytes, slot: int, counters: ReadCounters
    ) -> RawBytes:
        """Expert k's chunk ``i``: made from its sketch, read from the store (into buffer ``slot``),
        or the base's where the plan reads nothing of it."""
        if i not in self.wanted[k]:
            return base_raw
        if self.sketched[k]:
            out = self.buffers.get(slot, size)
            self.inputs.sketched_bytes(k, _buffer(base_raw), offset // self.itemsize, out)  # numpy: stays torch-free
            return out
        cid = self.tp.experts[k].chunks[i].id
        known = partial(self._known, i, base_raw)
        return self.store.get(cid, known=known, counters=counters, out=self.buffers.get(slot, size))

    def _merge_with_kernel(
        self, base_raw: RawBytes, raws: list[RawBytes], which: list[int] | None, out: memoryview
    ) -> bool:
        """Whether the method's array kernel merged the chunk into ``out`` (it may decline its values)."""
        if self.kernel is None:
            return False
        return self.kernel.merge(chunk_bits(base_raw), [chunk_bits(r) for r in raws], which, chunk_bits(out))

    def _merge_with_torch(
        self, base_raw: RawBytes, raws: list[RawBytes], which: list[int] | None, out: memoryview, at: int
    ) -> None:
        """The chunk (element ``at`` on) merged by the method's torch kernel, slice by slice, into ``out``."""
        tp, setup, dtype = self.tp, self.setup, self.tp.base.dtype
        self.kernels.need()
        base_t = _tensor(base_raw, dtype)
        experts = [base_t if raw is base_raw else _tensor(raw, dtype) for raw in raws]
        result_dtype = torch_dtype(setup.result_dtype(dtype))
        merged_t = _tensor(out, dtype).view(result_dtype)  # same width: by-chunk merges keep it
        for start in range(0, base_t.numel(), SLICE_ELEMENTS):
            part = slice(start, start + SLICE_ELEMENTS)
            slices = [e[part] for e in experts]
            result = merge_one(tp, setup, base_t[part], slices, self.prepared.get(), at + start, which)
            if result.dtype != result_dtype:  # pragma: no cover - a method breaking its dtype contract
                raise AssertionError(f"{tp.name}: merged to {result.dtype}, expected {result_dtype}")
            merged_t[part] = result

    # -- the method's per-tensor decisions ---------------------------------------------------

    def _prepare(self) -> Prepared:
        """The method's per-tensor decisions; sparsifiers see each expert's whole delta, made one
        at a time, or several at once (deterministic methods, memory permitting). Of the base, only
        the chunks the merge computes (and non-finite ones) are read: everywhere else every expert
        equals it, so the deltas there are 0 whatever the base holds. Large tensors
        (carry.streams_deltas) have their deltas made chunk by chunk, neither the base nor an
        expert held whole, and the idle chunk buffers freed first (150 MB with K = 16): deciding
        on an embedding is a merge's peak of memory."""
        import torch

        from mgit.merge.rng import tensor_generator

        tp, setup, method = self.tp, self.setup, self.setup.method
        delta_at: DeltaAt | None = None
        each = None
        if method.decides_per_expert:
            workers = _decide_workers(tp) if not method.random else 1
            if workers >= 2:
                each = partial(_decide_concurrently, workers)
            delta_at = self._deltas(base_chunks_read(tp, setup, self.carried), pooled=each is None)
        with torch.no_grad():
            return method.prepare(
                len(tp.experts),
                setup.tensor_params(tp.name),
                torch_dtype(tp.base.dtype),
                dtype=torch_dtype(setup.dtype) if setup.dtype else None,
                generator=tensor_generator(setup, tp.name),
                name=tp.name,
                each=each,
                delta_at=delta_at,
            )

    def _deltas(self, only: set[int], pooled: bool) -> DeltaAt:
        """Each expert's whole delta as the method's decisions ask for it: streamed chunk by
        chunk for a large tensor, else against the base read once (``only`` its chunks)."""
        from mgit.merge.methods.inputs import deltas_of

        inputs = self.inputs
        if streams_deltas(self.tp, self.setup):
            self.buffers.drop()  # and gives the freed memory back where the allocator is tuned
            return partial(_streamed_delta, inputs, only, self.buffers, pooled)
        base_t = inputs.read_base(only)
        return deltas_of(base_t, lambda k: inputs.expert(k, base_t, use_pool=pooled), made_for_call=True)


def _streamed_delta(
    inputs: TensorInputs, only: set[int], buffers: ChunkBuffers, pooled: bool, k: int, work: torch.dtype
) -> torch.Tensor:
    return inputs.delta(k, work, only, buffers.get, use_pool=pooled)


def _decide_concurrently(workers: int, fn: Callable[[int], None], ks: list[int]) -> None:
    """The method's decision ``fn`` for each expert in ``ks``, ``workers`` at once."""
    with ThreadPoolExecutor(workers, thread_name_prefix="mgit-decide") as deciders:
        list(deciders.map(fn, ks))


def _decide_workers(tp: TensorPlan) -> int:
    """How many experts' whole deltas may be decided at once within DECIDE_MEMORY."""
    from mgit.merge.sparsify import SELECT_BYTES_PER_ELEMENT, SORT_BYTES_PER_ELEMENT, select_reproduces_torch

    numel = max(1, tp.base.nbytes * 8 // _dtype(tp.base.dtype).bits)
    per_element = SELECT_BYTES_PER_ELEMENT if select_reproduces_torch() else SORT_BYTES_PER_ELEMENT
    return min(WORKERS, DECIDE_MEMORY // (per_element * numel))


class _Once:
    """A value made on first use, once, whichever pool thread asks first (a method's per-tensor
    decisions: an array kernel's chunks never need them, nor the torch they import)."""

    def __init__(self, make: Callable[[], Prepared]):
        self._make, self._lock = make, threading.Lock()
        self._value: Prepared | None = None

    def get(self) -> Prepared:
        with self._lock:
            if self._value is None:
                self._value = self._make()
            return self._value


def _unread(offset: int, size: int) -> bytes:  # pragma: no cover - every chunk is carried
    raise AssertionError(f"a carried tensor's bytes were read (offset {offset})")


# The type checker's view of the layers below, no run-time effect: a plan's dtypes are known
# (the headers they came from were read), and every chunk buffer the store returns is what
# the model layer's narrower signatures (bytes | memoryview, bytearray) take.


def _dtype(name: str) -> DType:
    """The DType of a name from a plan (known: ``lookup`` finds it)."""
    return cast("DType", lookup(name))


def _buffer(raw: RawBytes) -> bytes | memoryview:
    return cast("bytes | memoryview", raw)


def _tensor(raw: RawBytes, dtype: str) -> torch.Tensor:
    """A flat tensor over a chunk's bytes."""
    return tensor_from_bytes(cast(bytearray, raw), dtype, (-1,))
