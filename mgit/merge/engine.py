"""Executing a merge plan: tensor by tensor, streaming, writing results into the store.

For each output tensor the base's chunks are read once; an expert's tensor is the
base's bytes with only its differing chunks read over them (an expert identical to the
base costs nothing and shares the base's tensor). Only tensors of one name are in
memory at a time: the base, the K experts, the result — plus the method's own
intermediates (K deltas and their stacked copy), about 3K + 2 copies at peak. Results go straight into the chunk
store as deltas against the base where that is smaller. Nothing here moves a ref.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import torch

from mgit.errors import BadInputError
from mgit.graph.snapshot import Entry
from mgit.merge.methods import MergeMethod, merge_tensor, seeded_generator
from mgit.merge.plan import MergePlan, TensorPlan
from mgit.model.dtypes import lookup
from mgit.model.filetree import load_safetensors
from mgit.model.ingest import Ingestor
from mgit.model.manifest import TensorManifest
from mgit.model.safetensors_file import build_header
from mgit.model.torch_io import dtype_name, tensor_bytes, tensor_from_bytes, torch_dtype
from mgit.parallel import ordered_map
from mgit.progress import Bar
from mgit.store.chunkstore import ChunkStore


@dataclass(frozen=True)
class MergeSpec:
    method: MergeMethod
    params: dict[str, Any]
    seed: int
    dtype: str | None = None  # safetensors dtype names, as mergekit's dtype / out_dtype
    out_dtype: str | None = None
    params_for: Callable[[str], dict[str, Any]] | None = None  # per tensor (a config's filters/gradients)


@dataclass
class Execution:
    files: dict[str, Entry] = field(default_factory=dict)
    stats: dict[str, list] = field(default_factory=dict)  # file → relative chunk statistics vs the base
    decisions: dict[str, str] = field(default_factory=dict)  # tensor → merged | copied
    base_bytes_read: int = 0
    expert_bytes_read: int = 0
    expert_chunks_read: int = 0


def _starts(m: TensorManifest) -> list[int]:
    starts = [0]
    for c in m.chunks:
        starts.append(starts[-1] + c.size)
    return starts


def _read_into(
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    m: TensorManifest,
    indexes: list[int],
    buf: bytearray,
    what: str,
    base: tuple[TensorManifest, bytes] | None = None,
) -> None:
    """Read the chunks at ``indexes`` of ``m`` into their places in ``buf``. With ``base``
    (the base tensor's manifest and bytes, already in memory), expert chunks stored as
    deltas against a base chunk are decoded from those bytes instead of reading it again."""
    starts = _starts(m)
    known = None
    if base is not None:
        base_manifest, base_bytes = base
        base_starts = _starts(base_manifest)
        where = {c.id: k for k, c in enumerate(base_manifest.chunks)}

        def known(cid: str) -> bytes | None:
            k = where.get(cid)
            return None if k is None else bytes(base_bytes[base_starts[k] : base_starts[k + 1]])

    def read(i: int) -> bytes | memoryview:
        return store.get(m.chunks[i].id, what, known=known)

    for i, data in zip(indexes, ordered_map(pool, read, indexes), strict=True):
        buf[starts[i] : starts[i] + len(data)] = data


def _inputs(
    store: ChunkStore, pool: ThreadPoolExecutor, tp: TensorPlan, run: Execution
) -> tuple[bytearray, list[bytearray | None]]:
    """The base's bytes and, per expert, its bytes (None: identical to the base)."""
    what = f"tensor {tp.name!r} in {tp.file}"
    base = bytearray(tp.base.nbytes)
    before = store.reads.stored_bytes
    _read_into(store, pool, tp.base, list(range(len(tp.base.chunks))), base, what)
    run.base_bytes_read += store.reads.stored_bytes - before
    experts: list[bytearray | None] = []
    for m, indexes in zip(tp.experts, tp.reads, strict=True):
        if not indexes:
            experts.append(None)
            continue
        buf = bytearray(base)
        before = store.reads.stored_bytes
        _read_into(store, pool, m, indexes, buf, what, (tp.base, base))
        run.expert_bytes_read += store.reads.stored_bytes - before
        run.expert_chunks_read += len(indexes)
        experts.append(buf)
    return base, experts


def merge_one(tp: TensorPlan, spec: MergeSpec, base: bytearray, experts: list[bytearray | None]) -> torch.Tensor | None:
    """The merged tensor (None: a non-float tensor every input agrees on, copied as is)."""
    dtype = torch_dtype(tp.base.dtype)
    if not dtype.is_floating_point:
        if any(e is not None for e in experts):
            raise BadInputError(f"tensor {tp.name!r} ({tp.base.dtype}) differs between inputs and cannot be merged")
        return None
    base_t = tensor_from_bytes(base, tp.base.dtype, tp.base.shape)
    expert_ts = [base_t if e is None else tensor_from_bytes(e, tp.base.dtype, tp.base.shape) for e in experts]
    generator = seeded_generator(spec.seed, tp.name) if spec.method.random else None
    with torch.no_grad():
        return merge_tensor(
            spec.method,
            base_t if spec.method.needs_base else None,
            expert_ts,
            spec.params_for(tp.name) if spec.params_for else spec.params,
            dtype=torch_dtype(spec.dtype) if spec.dtype else None,
            out_dtype=torch_dtype(spec.out_dtype) if spec.out_dtype else None,
            generator=generator,
            name=tp.name,
        )


def execute(
    plan: MergePlan,
    spec: MergeSpec,
    ingestor: Ingestor,
    store: ChunkStore,
    pool: ThreadPoolExecutor,
    base_entries: dict[str, Entry],
    bar: Bar | None = None,
) -> Execution:
    """Merge every tensor; returns the new file entries (not yet committed)."""
    bar = bar or Bar()
    run = Execution()
    by_name = {tp.name: tp for tp in plan.tensors}
    for file, names in plan.files.items():
        ingestor.begin_file(file)
        specs, ids = [], {}
        for name in names:
            tp = by_name[name]
            base, experts = _inputs(store, pool, tp, run)
            result = merge_one(tp, spec, base, experts)
            if result is None:
                specs.append((name, lookup(tp.base.dtype), tp.base.shape))
                ids[name] = ingestor.graph.put_blob(tp.base.to_bytes())
                run.decisions[name] = "copied"
            else:
                raw = tensor_bytes(result)
                out = lookup(dtype_name(result.dtype))
                specs.append((name, out, tuple(result.shape)))
                ids[name] = ingestor.tensor(name, out, tuple(result.shape), len(raw), lambda o, n, r=raw: r[o : o + n])
                run.decisions[name] = "merged"
            bar.advance(tp.base.nbytes)
            del base, experts, result
        metadata = load_safetensors(ingestor.graph, base_entries[file].oid, file).layout.metadata
        run.files[file] = Entry("safetensors", ingestor.safetensors_tree(build_header(specs, metadata), ids))
        run.stats[file] = ingestor.file_stats
    return run
