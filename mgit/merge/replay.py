"""A merge rebuilt from its plan record (``mgit.plan/1``) to be computed again (``mgit merge
--verify``): the request and the setup it resolved to, read from the record rather than resolved
anew, and its plan as it was executed — a budget's chosen chunks and sketches as recorded, never
chosen again (a new ranking may choose otherwise: analysis caches, an expert sketched since).
Plain data over the record; the repository's part (commits, snapshots, stored sketches) is
mgit.ops.verify_merge's."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any

from mgit.errors import NotRecomputableError
from mgit.graph.snapshot import Snapshot
from mgit.merge.methods.base import MergeMethod
from mgit.merge.plan import MergePlan, TensorPlan, plan_tensor
from mgit.merge.record import HELD_ELSEWHERE, PlanRecord, TensorEntry
from mgit.merge.request import MergeRequest, MergeSetup
from mgit.merge.sketch.use import SketchUse
from mgit.model.manifest import TensorManifest

# (tensor plan, expert, the record's note of the sketch read) → that sketch, as the budget used it
SketchLookup = Callable[[TensorPlan, int, dict[str, Any]], SketchUse]


def recorded_request(record: PlanRecord) -> tuple[MergeRequest, list[str]]:
    """The request the merge had (what the record holds of it, its other options as recorded),
    and the recorded options this mgit does not know (a later mgit's: left out)."""
    known = {f.name for f in dataclasses.fields(MergeRequest)} - HELD_ELSEWHERE
    options = record.request or {}
    request = MergeRequest(
        experts=tuple(e.name for e in record.experts),
        method=record.method,
        base=record.base,
        params=dict(record.parameters),
        model=record.model,
        seed=record.seed,
        rng=record.rng or "mgit",  # a random method's record without one drew as mgit does
        dtype=record.dtype,
        out_dtype=record.out_dtype,
        **{k: v for k, v in options.items() if k in known},
    )
    return request, sorted(set(options) - known - HELD_ELSEWHERE)


def recorded_setup(
    record: PlanRecord, request: MergeRequest, method: MergeMethod, base_commit: str, base_snap: Snapshot
) -> MergeSetup:
    """The setup the merge resolved to: its recorded parameters (a config's per tensor, as each
    tensor's entry holds them: filters and gradients evaluated when it was made), seed and dtypes."""
    experts = len(record.experts)
    per_tensor = {t.name: t.parameters for t in record.tensors if t.parameters is not None}
    params_for = None
    if record.config is not None:

        def params_for(name: str) -> dict[str, Any]:
            found = per_tensor.get(name)
            if found is None:
                raise NotRecomputableError(f"the plan record holds no parameters of tensor {name!r}")
            return found

    experts_of = None
    if is_sliced(record):  # a `slices:` merge: each tensor's own number of experts
        counts = {t.name: len((t.sources or {}).get("experts") or ()) for t in record.tensors}

        def experts_of(name: str) -> int:
            return counts[name]

    return MergeSetup(
        method,
        method.resolve(record.parameters, experts) if params_for is None else dict(record.parameters),
        base_commit,
        [e.commit for e in record.experts],
        [e.name for e in record.experts],
        base_snap,
        base_ref=record.base,
        params_for=params_for,
        config=record.config,
        dtype=record.dtype,
        out_dtype=record.out_dtype,
        reference=record.reference,
        seed=record.seed,
        request=request,
        experts_of=experts_of,
    )


def recorded_plan(plan: MergePlan, record: PlanRecord, sketch: SketchLookup) -> MergePlan:
    """``plan`` (every differing chunk, from the inputs' manifests) reading what the record says
    was read: under a budget the chosen chunks and, in place of others, the sketches it read."""
    names = [t.name for t in record.tensors]
    if [tp.name for tp in plan.tensors] != names:
        raise NotRecomputableError(
            f"the plan record lists {len(names)} tensor(s), the recorded inputs give {len(plan.tensors)} others"
        )
    tensors = [_as_recorded(tp, entry, record, sketch) for tp, entry in zip(plan.tensors, record.tensors, strict=True)]
    return dataclasses.replace(plan, tensors=tensors)


def _as_recorded(tp: TensorPlan, entry: TensorEntry, record: PlanRecord, sketch: SketchLookup) -> TensorPlan:
    """One tensor's plan reading the chunks (and sketches) its entry says the budget chose."""
    if entry.expert_chunks_chosen is None:
        return tp
    if entry.budget is not None and any(entry.budget.sketch_ranks or ()) and entry.sketches is None:
        raise NotRecomputableError(
            f"tensor {entry.name!r} was merged from sketches that mgit {record.mgit_version or '(unknown)'} "
            "did not record; this merge cannot be computed again"
        )
    notes = entry.sketches or [None] * len(tp.reads)
    if len(entry.expert_chunks_chosen) != len(tp.reads) or len(notes) != len(tp.reads):
        raise NotRecomputableError(f"the plan record of tensor {entry.name!r} has another number of experts")
    for k, chosen in enumerate(entry.expert_chunks_chosen):
        if not set(chosen) <= set(tp.reads[k]):
            raise NotRecomputableError(f"tensor {entry.name!r}: the record chose chunks where expert {k} is the base")
    sketches = [sketch(tp, k, note) if note is not None else None for k, note in enumerate(notes)]
    return tp.restricted(entry.expert_chunks_chosen, sketches)


def is_sliced(record: PlanRecord) -> bool:
    """A `slices:` merge: its tensors name their own sources (model, commit, source tensor)."""
    return any(t.sources is not None for t in record.tensors)


def recorded_sources(record: PlanRecord) -> dict[str, str]:
    """A `slices:` merge's source models (as its config names them) → the commit each was read from."""
    out: dict[str, str] = {}
    for t in record.tensors:
        sources = t.sources or {}
        for src in [sources.get("base"), *(sources.get("experts") or ())]:
            if src is not None:
                out.setdefault(src["model"], src["commit"])
    return out


# a commit → its model's tensors (name → manifest)
TensorsOf = Callable[[str], Mapping[str, TensorManifest]]


def sliced_plan(
    record: PlanRecord, tensors_of: TensorsOf, cost: Callable[[str, set[str]], int], passes: int
) -> MergePlan:
    """A `slices:` merge's plan as it was made: each output tensor, in its recorded file and
    order, over the source tensors its entry names (the base's, else the first expert's, the
    reference for dtype and chunking), not planned again from the config."""
    plan = MergePlan(record.model, {}, [], expert_passes=passes)
    for entry in record.tensors:
        sources = entry.sources or {}
        experts = list(sources.get("experts") or ())
        lead = sources.get("base") or next(iter(experts), None)
        if lead is None:
            raise NotRecomputableError(f"the plan record names no source of tensor {entry.name!r}")
        inputs = [_source_tensor(tensors_of, src, entry.name) for src in experts]
        labels = [f"{src['model']} ({src['tensor']})" for src in experts]
        tp = plan_tensor(
            entry.file, entry.name, _source_tensor(tensors_of, lead, entry.name), inputs, labels, False, cost
        )
        tp.sources = sources
        plan.files.setdefault(entry.file, []).append(entry.name)
        plan.tensors.append(tp)
        plan.base_bytes += sum(tp.base_costs)
    return plan


def _source_tensor(tensors_of: TensorsOf, src: dict[str, Any], name: str) -> TensorManifest:
    found = tensors_of(src["commit"]).get(src["tensor"])
    if found is None:
        raise NotRecomputableError(
            f"tensor {name!r} was merged from {src['model']}'s {src['tensor']!r}, which its recorded commit "
            f"{src['commit'][:12]} does not hold"
        )
    return found
