"""Which output chunks of a merge are the base's own, known from the plan alone (torch-free: a
partial clone fetches only the base chunks a merge computes from, before torch loads)."""

from __future__ import annotations

from mgit.merge.plan import TensorPlan
from mgit.merge.request import MergeSetup

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
        needed |= {i for i in carried if tp.base.chunks[i].l2 is None or tp.base.chunks[i].max_abs is None}
    return needed


def base_reads(tp: TensorPlan, setup: MergeSetup) -> int:
    """What reading :func:`base_chunks_read` costs (the plan's estimate of base bytes read)."""
    return sum(tp.base_costs[i] for i in base_chunks_read(tp, setup))
