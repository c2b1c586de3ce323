"""Which output chunks of a merge are the base's own, known from the plan alone (torch-free: a
partial clone fetches only the base chunks a merge computes from, before torch loads)."""

from __future__ import annotations

from mgit.merge.plan import TensorPlan
from mgit.merge.request import MergeSetup
from mgit.model.manifest import ChunkRef

# Working dtypes that hold every value of an input dtype exactly (so base -> work -> base is the identity).
_WIDER = {"BF16": ("F32", "F64"), "F16": ("F32", "F64"), "F32": ("F64",)}


def carried_chunks(tp: TensorPlan, setup: MergeSetup) -> set[int]:
    """Indexes of the output chunks that are the base's own: no expert chunk was chosen there
    (every expert equals the base, or a budget left it out), the method declares that such a slice
    merges to the base, and the base's bytes survive the working and result dtypes unchanged. The
    engine carries those chunk ids into the merged manifest without reading, computing, encoding
    or hashing anything."""
    base = tp.base.dtype
    if setup.result_dtype(base) != base:
        return set()
    work = setup.dtype or base
    if work != base and work not in _WIDER.get(base, ()):
        return set()
    if not setup.method.keeps_base_where_unchanged(setup.resolved_params(tp.name)):
        return set()
    chosen = {i for k in range(len(tp.reads)) for i in tp.computed_from(k)}
    return {i for i in range(len(tp.base.chunks)) if i not in chosen}


def base_chunks_read(tp: TensorPlan, setup: MergeSetup, carried: set[int] | None = None) -> set[int]:
    """Indexes of the base chunks the engine reads for one tensor: none where every chunk is
    carried; the computed chunks for a method merging slice by slice — and for one deciding on
    whole deltas first (a sparsifier) also the carried chunks holding a non-finite value (a NaN
    of the base makes a NaN delta even where the experts equal it, which its decision sees);
    the whole tensor for a method that compares whole tensors. ``carried``: the tensor's
    :func:`carried_chunks`, when the caller has them."""
    carried = carried_chunks(tp, setup) if carried is None else carried
    count = len(tp.base.chunks)
    if len(carried) == count:
        return set()
    method = setup.method
    if not method.elementwise:
        return set(range(count))
    needed = set(range(count)) - carried
    if method.decides_per_expert:
        needed |= {i for i in carried if may_be_non_finite(tp.base.chunks[i])}
    return needed


def may_be_non_finite(chunk: ChunkRef) -> bool:
    """Whether a stored chunk may hold a NaN or an infinity: it has no statistics then."""
    return chunk.l2 is None or chunk.max_abs is None


# From this many bytes on, a sparsifier's deltas are made chunk by chunk, neither the base nor an
# expert held whole (131 MB each for a 65M-element bf16 embedding): the base's chunks are decoded
# once per expert instead, and once more for the merge.
STREAM_DELTAS_FROM = 64 * 2**20


def streams_deltas(tp: TensorPlan, setup: MergeSetup) -> bool:
    """Whether the engine makes this tensor's deltas chunk by chunk (a sketched expert is made
    over the whole base, so a tensor with one is not)."""
    return (
        setup.method.decides_per_expert
        and tp.base.nbytes >= STREAM_DELTAS_FROM
        and all(tp.sketch(k) is None for k in range(len(tp.experts)))
    )


def delta_chunks(tp: TensorPlan, k: int, read: set[int]) -> list[int]:
    """The chunks where expert k's delta is not simply 0, of the base chunks ``read``
    (:func:`base_chunks_read`): where it differs from the base, and where the base may hold a
    non-finite value (x - x is NaN there)."""
    differs = set(tp.reads[k])
    return sorted(i for i in read if i in differs or may_be_non_finite(tp.base.chunks[i]))


def base_reads(tp: TensorPlan, setup: MergeSetup) -> int:
    """What the engine's base reads cost (the plan's estimate of base bytes read): the chunks of
    :func:`base_chunks_read` once, or, for deltas made chunk by chunk, those of each expert's
    delta and then every computed chunk for the merge."""
    read = base_chunks_read(tp, setup)
    if not streams_deltas(tp, setup):
        return sum(tp.base_costs[i] for i in read)
    deltas = sum(tp.base_costs[i] for k in range(len(tp.experts)) for i in delta_chunks(tp, k, read))
    carried = carried_chunks(tp, setup)
    return deltas + sum(cost for i, cost in enumerate(tp.base_costs) if i not in carried)
