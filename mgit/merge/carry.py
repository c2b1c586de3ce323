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
    chosen = {i for reads in tp.reads for i in reads}
    return {i for i in range(len(tp.base.chunks)) if i not in chosen}


def base_reads(tp: TensorPlan, setup: MergeSetup) -> int:
    """What the engine reads of the base for one tensor: nothing where every chunk is carried; the
    computed chunks only for a method merging slice by slice; the whole tensor for a method that
    decides on whole deltas first (a sparsifier), compares whole tensors, or carries nothing."""
    carried = carried_chunks(tp, setup)
    if len(carried) == len(tp.base.chunks):
        return 0
    method = setup.method
    if carried and method.elementwise and not method.decides_per_expert:
        return sum(cost for i, cost in enumerate(tp.base_costs) if i not in carried)
    return sum(tp.base_costs)
