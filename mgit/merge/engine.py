"""Executing a merge plan: tensor by tensor, streaming, writing results into the store.

Elementwise methods run chunk by chunk on the pool (sparsifiers decide per expert first, then
merge chunk by chunk); others hold the base and experts' tensor whole. Output chunks that are
the base's own are carried unread. Nothing here moves a ref. How a merge runs: docs/merging.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import cast

from mgit.errors import BadInputError
from mgit.graph.snapshot import Entry
from mgit.merge.chunk_buffers import ChunkBuffers
from mgit.merge.chunk_job import ChunkMerge
from mgit.merge.execution import Execution
from mgit.merge.io import MergeIO
from mgit.merge.kernels import Kernels, merge_one
from mgit.merge.plan import TensorPlan
from mgit.merge.record import PlannedMerge
from mgit.merge.request import MergeSetup
from mgit.merge.rng import with_draws
from mgit.merge.tensor_inputs import TensorInputs, chunk_starts
from mgit.model.chunking import chunk_ranges, chunk_size_for
from mgit.model.dtypes import DType, lookup
from mgit.model.filetree import load_safetensors
from mgit.model.ingest import Ingestor, TensorJob
from mgit.model.materialize import StagedFile
from mgit.model.safetensors_file import build_header
from mgit.model.torch_io import dtype_name, tensor_bytes
from mgit.progress import Bar


def _dtype(name: str) -> DType:
    """The DType of a name from a plan (known: ``lookup`` finds it: the headers it came from
    were read)."""
    return cast("DType", lookup(name))


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


# -- whole tensors -------------------------------------------------------------------------


def _merge_whole(
    tp: TensorPlan, setup: MergeSetup, ingestor: Ingestor, io: MergeIO, run: Execution, staged: StagedFile | None
) -> tuple[str, str]:
    """(manifest id, result dtype) of one tensor merged in memory as a whole: the base and
    every expert are held at once (the methods that need it are those comparing whole
    tensors: SLERP, Model Stock; and any merge whose result is chunked unlike its inputs)."""
    inputs = TensorInputs(tp, io.store, io.pool, run)
    run.tally(len(tp.base.chunks), 0, tp.base.nbytes)
    inputs.prefetch(set(range(len(tp.base.chunks))))
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
        staged.carry(tp.name, offset, c.id, c.size)
        offset += c.size


def execute(
    planned: PlannedMerge,
    io: MergeIO,
    ingestor: Ingestor,
    bar: Bar | None = None,
    stage: Callable[[str, bytes, int], StagedFile] | None = None,
) -> Execution:
    """Merge every tensor of the plan, reading through ``io``; returns the new file entries (not
    yet committed).

    With ``stage`` (file, header, data size → a StagedFile), each merged file is also written
    out as it is produced; ``Execution.staged`` holds those completed as predicted."""
    (plan, setup), bar = planned, bar or Bar()
    setup = with_draws(plan, setup)  # --rng mergekit: each tensor's draws as mergekit makes them
    run = Execution()
    by_name = {tp.name: tp for tp in plan.tensors}
    kernels = Kernels.for_plan(plan)
    buffers = ChunkBuffers()
    try:
        for file, names in plan.files.items():
            tensors = [by_name[n] for n in names]
            _execute_file(file, tensors, setup, ingestor, io, bar, stage, run, kernels, buffers)
        for path, data in plan.rewritten.items():  # a `slices:` merge's config.json and shard index
            run.files[path] = Entry("blob", io.graph.put_blob(data))
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
    io: MergeIO,
    bar: Bar,
    stage: Callable[[str, bytes, int], StagedFile] | None,
    run: Execution,
    kernels: Kernels,
    buffers: ChunkBuffers,
) -> None:
    ingestor.begin_file(file)
    metadata = load_safetensors(io.graph, setup.base_snap[file].oid, file).layout.metadata
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
                ids[tp.name] = io.graph.put_blob(tp.base.to_bytes())
                run.decisions[tp.name] = "copied"
                bar.advance(tp.base.nbytes)
                continue
            if _by_chunk(tp, setup):
                batch.append(ChunkMerge(tp, setup, io.store, io.pool, run, staged, kernels, buffers).job())
                if setup.method.decides_per_expert:  # its decisions are held until the tensor is merged
                    ids |= _run_jobs(ingestor, batch, kernels)
                out = setup.result_dtype(tp.base.dtype)
            else:
                ids |= _run_jobs(ingestor, batch, kernels)
                ids[tp.name], out = _merge_whole(tp, setup, ingestor, io, run, staged)
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
