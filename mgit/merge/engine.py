"""Executing a merge plan: tensor by tensor, streaming, writing results into the store.

Elementwise methods run chunk by chunk on the pool (sparsifiers decide per expert first, then
merge chunk by chunk); others hold the base and experts' tensor whole. Output chunks that are
the base's own are carried unread. Nothing here moves a ref. How a merge runs: docs/merging.md.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, cast

import numpy as np

from mgit.errors import BadInputError
from mgit.graph.snapshot import Entry
from mgit.merge.carry import base_chunks_read, carried_chunks, streams_deltas
from mgit.merge.chunk_buffers import ChunkBuffers
from mgit.merge.execution import Execution
from mgit.merge.kernels import Kernels, array_kernel_for, chunk_bits, merge_one
from mgit.merge.plan import MergePlan, TensorPlan
from mgit.merge.request import MergeSetup
from mgit.merge.tensor_inputs import TensorInputs, chunk_starts, tensor_what
from mgit.model.chunking import chunk_ranges, chunk_size_for
from mgit.model.dtypes import DType, lookup
from mgit.model.filetree import load_safetensors
from mgit.model.ingest import Ingestor, ReadAt, TensorJob
from mgit.model.manifest import ChunkRef
from mgit.model.materialize import StagedFile
from mgit.model.safetensors_file import build_header
from mgit.model.torch_io import dtype_name, tensor_bytes, tensor_from_bytes, torch_dtype
from mgit.parallel import WORKERS, give_back_freed_memory
from mgit.progress import Bar
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


# -- chunk by chunk ------------------------------------------------------------------------


def _by_chunk(tp: TensorPlan, setup: MergeSetup) -> bool:
    """Whether this tensor can be merged one stored chunk at a time: an elementwise method
    and the result cut into chunks exactly where the base and every expert are."""
    if not setup.method.elementwise or not tp.base.chunks:
        return False
    sizes = [c.size for c in tp.base.chunks]
    if any([c.size for c in m.chunks] != sizes for m in tp.experts):
        return False
    out = lookup(setup.result_dtype(tp.base.dtype))
    if out is None or out.bits != _dtype(tp.base.dtype).bits:
        return False
    size = chunk_size_for(tp.base.shape, out.bits)
    return [e - s for s, e in chunk_ranges(tp.base.nbytes, size)] == sizes


def _decide_workers(tp: TensorPlan) -> int:
    """How many experts' whole deltas may be decided at once within DECIDE_MEMORY."""
    from mgit.merge.sparsify import SELECT_BYTES_PER_ELEMENT, SORT_BYTES_PER_ELEMENT, select_reproduces_torch

    numel = max(1, tp.base.nbytes * 8 // _dtype(tp.base.dtype).bits)
    per_element = SELECT_BYTES_PER_ELEMENT if select_reproduces_torch() else SORT_BYTES_PER_ELEMENT
    return min(WORKERS, DECIDE_MEMORY // (per_element * numel))


def _prepare(
    tp: TensorPlan, setup: MergeSetup, inputs: TensorInputs, carried: set[int], buffers: ChunkBuffers
) -> Prepared:
    """The method's per-tensor decisions; sparsifiers see each expert's whole delta, made one at a
    time, or several at once (deterministic methods, memory permitting). Of the base, only the
    chunks the merge computes (and non-finite ones) are read: everywhere else every expert equals
    it, so the deltas there are 0 whatever the base holds. Large tensors (carry.streams_deltas)
    have their deltas made chunk by chunk, neither the base nor an expert held whole, and the
    idle chunk buffers freed first (150 MB with K = 16): deciding on an embedding is a merge's
    peak of memory."""
    import torch

    from mgit.merge.methods.inputs import deltas_of
    from mgit.merge.sparsify import seeded_generator

    method = setup.method
    delta_at: DeltaAt | None = None
    each = None
    if method.decides_per_expert:
        only = base_chunks_read(tp, setup, carried)
        workers = _decide_workers(tp) if not method.random else 1
        if workers >= 2:

            def each(fn: Callable[[int], None], ks: list[int]) -> None:
                with ThreadPoolExecutor(workers, thread_name_prefix="mgit-decide") as deciders:
                    list(deciders.map(fn, ks))

        if streams_deltas(tp, setup):
            buffers.drop()
            give_back_freed_memory()

            def streamed(k: int, work: torch.dtype) -> torch.Tensor:
                return inputs.delta(k, work, only, buffers.get, use_pool=each is None)

            delta_at = streamed

        else:
            base_t = inputs.read_base(only)
            pooled = each is None
            delta_at = deltas_of(base_t, lambda k: inputs.expert(k, base_t, use_pool=pooled), made_for_call=True)

    with torch.no_grad():
        return method.prepare(
            len(tp.experts),
            setup.tensor_params(tp.name),
            torch_dtype(tp.base.dtype),
            dtype=torch_dtype(setup.dtype) if setup.dtype else None,
            generator=seeded_generator(setup.seed, tp.name) if method.random else None,
            name=tp.name,
            each=each,
            delta_at=delta_at,
        )


class _MergedReads:
    """A merged tensor's chunks as the ingestor reads them (``read``), with the read-ahead it
    asks for a window of chunks before it reads them (``ahead``: that chunk's planned inputs)."""

    def __init__(self, read: ReadAt, ahead: Callable[[int], None]):
        self._read, self._ahead = read, ahead

    def __call__(self, offset: int, size: int) -> bytes | memoryview:
        return self._read(offset, size)

    def will_need(self, offset: int, size: int) -> None:
        self._ahead(offset)


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


def _chunk_job(
    tp: TensorPlan,
    setup: MergeSetup,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    run: Execution,
    staged: StagedFile | None,
    kernels: Kernels,
    buffers: ChunkBuffers,
) -> tuple[TensorJob, dict[int, bytes | memoryview]]:
    """The ingestor's job for one tensor merged chunk by chunk, and the base chunks it holds for
    the ingestor (as delta bases) until each is taken; cleared once the job has run. A chunk
    goes through the method's array kernel when it has one for the tensor (torch-free), else
    (or when the kernel declines the chunk's values) through its torch kernel."""
    inputs = TensorInputs(tp, store, pool, run)
    starts = chunk_starts(tp.base)
    carried = carried_chunks(tp, setup)
    computed_bytes = sum(c.size for i, c in enumerate(tp.base.chunks) if i not in carried)
    run.tally(len(tp.base.chunks) - len(carried), len(carried), computed_bytes)
    if staged is not None:
        for i in sorted(carried):
            c = tp.base.chunks[i]
            staged.carry(tp.name, starts[i], c.id, c.size, inputs.what)
    out = _dtype(setup.result_dtype(tp.base.dtype))
    held: dict[int, bytes | memoryview] = {}  # chunk index → base bytes, until the ingestor takes them
    if len(carried) == len(tp.base.chunks):  # nothing to merge: the base's manifest as it is
        return TensorJob(tp.name, out, tp.base.shape, tp.base.nbytes, _unread, carried=tp.base.chunks.__getitem__), held
    if setup.method.decides_per_expert:  # its decisions read the base and the experts first
        _prefetch(tp, store, {i for i in range(len(tp.base.chunks)) if i not in carried})
    prepared = _Once(lambda: _prepare(tp, setup, inputs, carried, buffers))
    if setup.method.decides_per_expert:
        prepared.get()
    index = {start: i for i, start in enumerate(starts[:-1])}
    exact = [set(r) for r in tp.reads]  # expert chunks read from the store
    wanted = [set(tp.computed_from(k)) for k in range(len(tp.reads))]  # ... and those sketches stand for
    sketched = [tp.sketch(k) is not None for k in range(len(tp.reads))]
    # Experts equal to the base at a chunk (unchanged there, or left out by a budget) add exactly
    # nothing there to a method that skips zero deltas: they are left out of its math.
    skips = setup.method.skips_zero_deltas
    base_index = {c.id: k for k, c in enumerate(tp.base.chunks)}
    dtype = tp.base.dtype
    itemsize = _dtype(dtype).bits // 8
    kernel = array_kernel_for(tp, setup) if kernels.arrays else None
    what = inputs.what

    def base_chunk(i: int, counters: ReadCounters) -> RawBytes:
        if inputs.base is not None and i in inputs.held:  # already in memory
            return memoryview(inputs.base)[starts[i] : starts[i + 1]]
        return store.get(tp.base.chunks[i].id, what, counters=counters, out=buffers.get(0, starts[i + 1] - starts[i]))

    def with_torch(base_raw: RawBytes, raws: list[RawBytes], which: list[int] | None, out: memoryview, at: int) -> None:
        """The chunk (element ``at`` on) merged by the method's torch kernel, slice by slice, into ``out``."""
        kernels.need()
        base_t = _tensor(base_raw, dtype)
        experts = [base_t if raw is base_raw else _tensor(raw, dtype) for raw in raws]
        result_dtype = torch_dtype(setup.result_dtype(dtype))
        merged_t = _tensor(out, dtype).view(result_dtype)  # same width: by-chunk merges keep it
        for start in range(0, base_t.numel(), SLICE_ELEMENTS):
            part = slice(start, start + SLICE_ELEMENTS)
            slices = [e[part] for e in experts]
            result = merge_one(tp, setup, base_t[part], slices, prepared.get(), at + start, which)
            if result.dtype != result_dtype:  # pragma: no cover - a method breaking its dtype contract
                raise AssertionError(f"{tp.name}: merged to {result.dtype}, expected {result_dtype}")
            merged_t[part] = result

    def read(offset: int, size: int) -> bytes | memoryview:
        i = index[offset]
        base_id = tp.base.chunks[i].id
        base_costs, expert_costs = ReadCounters(), ReadCounters()
        base_raw = base_chunk(i, base_costs)

        def known(cid: str) -> RawBytes | None:
            if cid == base_id:
                return base_raw
            k = base_index.get(cid) if inputs.base is not None else None
            if k is None or inputs.base is None or k not in inputs.held:
                return None
            return memoryview(inputs.base)[starts[k] : starts[k + 1]]

        present = [k for k in range(len(tp.experts)) if not skips or i in wanted[k]]
        raws = []
        for slot, k in enumerate(present, start=2):
            if sketched[k] and i in wanted[k]:
                raws.append(_sketched_chunk(inputs, k, base_raw, offset // itemsize, buffers.get(slot, size)))
            elif i in wanted[k]:
                cid = tp.experts[k].chunks[i].id
                raws.append(store.get(cid, what, known=known, counters=expert_costs, out=buffers.get(slot, size)))
            else:
                raws.append(base_raw)
        which = None if len(present) == len(tp.experts) else present
        out = buffers.get(1, size)
        if kernel is None or not kernel.merge(
            chunk_bits(base_raw), [chunk_bits(r) for r in raws], which, chunk_bits(out)
        ):
            with_torch(base_raw, raws, which, out, offset // itemsize)
        if staged is not None:
            staged.write(tp.name, offset, out)
        run.count(base_costs, expert_costs, sum(i in w for w in exact))
        if not np.array_equal(np.frombuffer(out, np.uint8), np.frombuffer(base_raw, np.uint8)):
            held[i] = _buffer(base_raw)  # the ingestor will want it as the delta base
        return out

    def ahead(offset: int) -> None:
        """The chunk's inputs read into the page cache in the background, a window ahead."""
        i = index[offset]
        ids = [] if inputs.base is not None and i in inputs.held else [tp.base.chunks[i].id]
        store.prefetch(ids + [tp.experts[k].chunks[i].id for k in range(len(tp.experts)) if i in exact[k]])

    def parent_bytes(i: int, cid: str) -> bytes | memoryview | None:
        return held.pop(i, None) if cid == tp.base.chunks[i].id else None

    def carry(i: int) -> ChunkRef | None:
        return tp.base.chunks[i] if i in carried else None

    reads = _MergedReads(read, ahead)
    return TensorJob(tp.name, out, tp.base.shape, tp.base.nbytes, reads, parent_bytes, carry), held


def _sketched_chunk(inputs: TensorInputs, k: int, base_raw: RawBytes, at: int, out: memoryview) -> RawBytes:
    """Expert k's chunk (elements ``at`` on) made from its sketch over the base's chunk, into ``out``
    (numpy: an array kernel's merge stays torch-free)."""
    inputs.sketched_bytes(k, _buffer(base_raw), at, out)
    return out


def _run_jobs(
    ingestor: Ingestor, jobs: list[tuple[TensorJob, dict[int, bytes | memoryview]]], kernels: Kernels
) -> dict[str, str]:
    """Merge the tensors of ``jobs`` through one window of the pool, emptying ``jobs``; returns
    their manifest ids by name."""
    if not jobs:
        return {}
    try:
        return dict(zip([j.name for j, _ in jobs], ingestor.tensors([j for j, _ in jobs]), strict=True))
    finally:
        kernels.restore()
        for _, held in jobs:
            held.clear()
        jobs.clear()


def _prefetch(tp: TensorPlan, store: ChunkStore, computed: set[int]) -> None:
    """Ask for the tensor's planned chunks (base chunks it computes from, chosen expert chunks)
    to be read in the background: their disk reads overlap the merging of the first ones."""
    ids = [tp.base.chunks[i].id for i in sorted(computed)]
    ids += [tp.experts[k].chunks[i].id for k, reads in enumerate(tp.reads) for i in reads]
    store.prefetch(ids)


def _unread(offset: int, size: int) -> bytes:  # pragma: no cover - every chunk is carried
    raise AssertionError(f"a carried tensor's bytes were read (offset {offset})")


# -- whole tensors -------------------------------------------------------------------------


def _merge_whole(
    tp: TensorPlan,
    setup: MergeSetup,
    ingestor: Ingestor,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    run: Execution,
    staged: StagedFile | None,
) -> tuple[str, str]:
    """(manifest id, result dtype) of one tensor merged in memory as a whole: the base and
    every expert are held at once (the methods that need it are those comparing whole
    tensors: SLERP, Model Stock; and any merge whose result is chunked unlike its inputs)."""
    inputs = TensorInputs(tp, store, pool, run)
    run.tally(len(tp.base.chunks), 0, tp.base.nbytes)
    _prefetch(tp, store, set(range(len(tp.base.chunks))))
    base_t = inputs.read_base()
    experts = [inputs.expert(k, base_t) for k in range(len(tp.experts))]
    result = merge_one(tp, setup, base_t, experts)
    del experts
    raw = tensor_bytes(result)
    out = _dtype(dtype_name(result.dtype))
    if staged is not None and out.name == setup.result_dtype(tp.base.dtype):
        staged.write(tp.name, 0, raw)
    assert inputs.base is not None  # read_base() holds it
    base_starts, view = chunk_starts(tp.base), memoryview(inputs.base)
    same_width = out.bits == _dtype(tp.base.dtype).bits

    def parent_bytes(i: int, cid: str) -> memoryview | None:
        ok = same_width and i < len(tp.base.chunks) and tp.base.chunks[i].id == cid
        return view[base_starts[i] : base_starts[i + 1]] if ok else None

    manifest = ingestor.tensor(tp.name, out, tp.base.shape, len(raw), lambda o, n: raw[o : o + n], parent_bytes)
    return manifest, out.name


# -- the plan ------------------------------------------------------------------------------


def _copy(tp: TensorPlan, run: Execution, staged: StagedFile | None) -> None:
    """A tensor every input agrees on is copied as is: its chunks are carried (only a staged
    file needs their bytes, which it copies from the working tree or reads when it is filled)."""
    run.tally(carried=len(tp.base.chunks))
    if staged is None:
        return
    offset = 0
    for c in tp.base.chunks:
        staged.carry(tp.name, offset, c.id, c.size, tensor_what(tp))
        offset += c.size


def execute(
    plan: MergePlan,
    setup: MergeSetup,
    ingestor: Ingestor,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    base_entries: dict[str, Entry],
    bar: Bar | None = None,
    stage: Callable[[str, bytes, int], StagedFile] | None = None,
) -> Execution:
    """Merge every tensor; returns the new file entries (not yet committed).

    With ``stage`` (file, header, data size → a StagedFile), each merged file is also written
    out as it is produced; ``Execution.staged`` holds those completed as predicted."""
    bar = bar or Bar()
    run = Execution()
    by_name = {tp.name: tp for tp in plan.tensors}
    kernels = Kernels.for_plan(plan)
    buffers = ChunkBuffers()
    try:
        for file, names in plan.files.items():
            tensors = [by_name[n] for n in names]
            _execute_file(file, tensors, setup, ingestor, store, pool, base_entries, bar, stage, run, kernels, buffers)
    except BaseException:
        for staged in run.staged.values():
            staged.discard()
        raise
    return run


def _execute_file(
    file: str,
    tensors: list[TensorPlan],
    setup: MergeSetup,
    ingestor: Ingestor,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    base_entries: dict[str, Entry],
    bar: Bar,
    stage: Callable[[str, bytes, int], StagedFile] | None,
    run: Execution,
    kernels: Kernels,
    buffers: ChunkBuffers,
) -> None:
    ingestor.begin_file(file)
    metadata = load_safetensors(ingestor.graph, base_entries[file].oid, file).layout.metadata
    floating = {tp.name: _dtype(tp.base.dtype).mergeable for tp in tensors}  # others are copied
    predicted = [
        (tp.name, _dtype(setup.result_dtype(tp.base.dtype) if floating[tp.name] else tp.base.dtype), tp.base.shape)
        for tp in tensors
    ]
    header = build_header(predicted, metadata)
    size = sum(math.prod(shape) * dtype.bits // 8 for _, dtype, shape in predicted)
    staged = stage(file, header, size) if stage is not None else None
    try:
        specs, ids = [], {}
        # Tensors merged chunk by chunk go through the pool together: no draining at each tensor.
        batch: list[tuple[TensorJob, dict[int, bytes | memoryview]]] = []
        for tp in tensors:
            if not floating[tp.name]:
                if any(tp.reads):
                    raise BadInputError(f"tensor {tp.name!r} ({tp.base.dtype}) differs between inputs; cannot merge it")
                _copy(tp, run, staged)
                specs.append((tp.name, _dtype(tp.base.dtype), tp.base.shape))
                ids[tp.name] = ingestor.graph.put_blob(tp.base.to_bytes())
                run.decisions[tp.name] = "copied"
                bar.advance(tp.base.nbytes)
                continue
            if _by_chunk(tp, setup):
                batch.append(_chunk_job(tp, setup, store, pool, run, staged, kernels, buffers))
                if setup.method.decides_per_expert:  # its decisions are held until the tensor is merged
                    ids |= _run_jobs(ingestor, batch, kernels)
                out = setup.result_dtype(tp.base.dtype)
            else:
                ids |= _run_jobs(ingestor, batch, kernels)
                ids[tp.name], out = _merge_whole(tp, setup, ingestor, store, pool, run, staged)
            specs.append((tp.name, _dtype(out), tp.base.shape))
            run.decisions[tp.name] = "merged"
        ids |= _run_jobs(ingestor, batch, kernels)
        actual = build_header(specs, metadata)
        ids = {tp.name: ids[tp.name] for tp in tensors}  # in the file's order
        run.files[file] = Entry("safetensors", ingestor.safetensors_tree(actual, ids))
        run.stats[file] = ingestor.file_stats
    except BaseException:
        if staged is not None:
            staged.discard()
        raise
    if staged is not None:
        if actual == header:
            staged.entry_oid = run.files[file].oid
            run.staged[file] = staged
        else:  # a method returned another dtype than predicted: the checkout writes this file
            staged.discard()
