"""``mgit merge --verify REV``: a merge commit computed again from its plan record and every output
chunk id compared with the commit's.

The merge is rebuilt from what it recorded (mgit.merge.replay: method, per-tensor parameters,
seed, dtypes, inputs, the request's options, a budget's chosen chunks and sketches), never
resolved or budgeted anew, and run through the engine a merge runs (mgit.merge.engine). Nothing
is written (mgit.merge.scratch): the recomputed chunks are hashed and dropped, the manifests
held in memory until compared, so the repository, its refs and the working tree stay as they
were. A partial clone fetches what the merge computed from, as the merge fetched it (the
base's chunks, the chosen expert chunks and sketch blocks), and nothing of the commit itself:
its chunks are compared by id, never read."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mgit.context import Context
from mgit.errors import BadInputError, NotRecomputableError, UnknownMethodError
from mgit.graph import records
from mgit.graph.snapshot import Entry, Snapshot
from mgit.ops.merge import fetch_planned
from mgit.ops.merge_planning import merge_io, with_model
from mgit.progress import byte_progress
from mgit.remote.transfer import Transfer
from mgit.version import __version__

if TYPE_CHECKING:
    from mgit.graph.objects import Graph
    from mgit.merge.plan import MergePlan, TensorPlan
    from mgit.merge.record import PlannedMerge, PlanRecord
    from mgit.merge.scratch import ScratchGraph
    from mgit.merge.sketch.use import SketchOffer, SketchUse
    from mgit.model.filetree import StoredSafetensors
    from mgit.model.manifest import TensorManifest
    from mgit.store.chunkstore import ChunkStore


@dataclass(frozen=True)
class Difference:
    """One place where the recomputed merge differs from the commit (``what``): a tensor's
    ``chunk`` (its first differing one, by index and id), a tensor's ``layout`` (dtype, shape and
    chunk count, or absent on one side), a merged file's ``header`` (metadata, tensor order), or a
    ``file`` beside the model (by entry id)."""

    what: str  # chunk | layout | header | file
    file: str
    tensor: str | None = None
    chunk: int | None = None
    recorded: str | None = None  # the commit's: a chunk id, a layout (``BF16[4, 8] in 2 chunk(s)``), an entry id
    recomputed: str | None = None  # the recomputation's, alike (None: absent)


@dataclass(frozen=True)
class MergeVerification:
    """What ``merge --verify`` found: how many tensors and chunks were compared and where the
    recomputation differs (``differences``, in the commit's file and tensor order; empty: the
    merge is bit-identical to its recomputation)."""

    commit: str
    method: str
    made_by: str  # the mgit version the record names ("" for a record that names none)
    verified_by: str
    tensors: int
    chunks: int
    differences: list[Difference] = field(default_factory=list)
    fetched_bytes: int | None = None  # a partial clone: what was fetched to compute it (None: not one)
    unknown_options: list[str] = field(default_factory=list)  # recorded options this mgit does not know

    @property
    def identical(self) -> bool:
        return not self.differences

    @property
    def same_version(self) -> bool:
        return self.made_by == self.verified_by


def verify_merge(ctx: Context, rev: str = "HEAD") -> MergeVerification:
    """Compute a merge commit again from its plan record and compare every output chunk id.

    The merge is rebuilt from what it recorded (a budgeted merge from the chunks and sketches its
    budget chose, a random method from its seed) and run through the merge engine; nothing is
    written and the working tree is untouched. A merge made by another mgit version is verified
    too (``made_by`` says which).

    Args:
        rev: The merge commit (default HEAD).

    Returns:
        The comparison: tensors and chunks compared, and where the recomputation differs
        (``identical`` when nowhere).

    Raises:
        BadInputError: ``rev`` is not a model merge commit (it has no plan record).
        NotRecomputableError: The record does not say enough to compute the merge again (a
            method this mgit does not know, a sketch it read that is no longer stored).
        RevisionError: ``rev`` names no commit.
    """
    from mgit.merge.plan import merged_files
    from mgit.merge.record import PlanRecord
    from mgit.merge.scratch import KeepingStore, ScratchGraph

    commit = ctx.refs.resolve(rev)
    info = ctx.graph.commit(commit)
    doc = records.read_plan(ctx.graph, info.tree)
    if doc is None:
        raise BadInputError(f"{rev} ({commit[:12]}) is not a model merge commit: it has no merge plan record to verify")
    record = PlanRecord.from_json(doc)
    scratch = ScratchGraph(ctx.graph)
    planned, unknown, store = _rebuild(ctx, record, info.parents[0] if info.parents else "", scratch)
    fetched = None
    if ctx.is_partial:
        transfers = {"base": Transfer(), "experts": Transfer()}
        made_here = store.keeps if isinstance(store, KeepingStore) else None  # realigned rows: on no remote
        fetch_planned(ctx, planned.plan, planned.setup, transfers, made_here)
        fetched = transfers["base"].bytes + transfers["experts"].bytes
    files = _recompute(ctx, planned, scratch, store)
    merged = merged_files(planned.setup.base_snap, planned.plan, files)
    tensors, chunks, differences = _compare(ctx.graph, scratch, ctx.snapshot(commit), merged, files)
    return MergeVerification(
        commit, record.method, record.mgit_version, __version__, tensors, chunks, differences, fetched, unknown
    )


def _rebuild(
    ctx: Context, record: PlanRecord, first_parent: str, scratch: ScratchGraph
) -> tuple[PlannedMerge, list[str], ChunkStore]:
    """The merge as it was planned and executed: its setup and plan rebuilt from the record, the
    recorded options this mgit does not know, and the store its inputs are read from (a
    tokenizer merge's rows aligned again are held in memory)."""
    from mgit.merge.methods.registry import get_method
    from mgit.merge.plan import plan_merge
    from mgit.merge.record import PlannedMerge
    from mgit.merge.replay import is_sliced, recorded_plan, recorded_request, recorded_setup
    from mgit.merge.scratch import KeepingStore
    from mgit.ops import replay_inputs

    try:
        method = get_method(record.method)
    except UnknownMethodError:
        raise NotRecomputableError(
            f"the merge was made with method {record.method!r} (mgit {record.mgit_version}), which this mgit "
            f"({__version__}) does not know"
        ) from None
    if record.base is not None and record.base != first_parent:
        raise NotRecomputableError(f"the plan record's base {record.base[:12]} is not the commit's first parent")
    given = record.reference or first_parent
    base_snap = replay_inputs.input_snapshot(ctx, record, given, "the reference" if record.reference else "the base")
    if record.reference is not None:  # a merge without a base: the reference's model on the first parent's files
        base_snap = with_model(ctx.snapshot(first_parent), base_snap, record.model)
    request, unknown = recorded_request(record)
    setup = recorded_setup(record, request, method, first_parent, base_snap)
    passes = 2 if method.decides_per_expert else 1
    if is_sliced(record):
        return PlannedMerge(replay_inputs.sliced(ctx, record, setup, passes), setup), unknown, ctx.store
    store: ChunkStore = ctx.store
    names = setup.expert_names
    snaps = [replay_inputs.input_snapshot(ctx, record, c, n) for c, n in zip(setup.expert_commits, names, strict=True)]
    plan_base = base_snap
    if record.tokenizer is not None:  # the rows moved to the merged vocabulary again, into the scratch
        store = KeepingStore(ctx.store)
        plan_base, snaps, output = replay_inputs.vocabulary(ctx, record, setup, snaps, scratch, store)
        setup = dataclasses.replace(setup, base_snap=output)
    allow_missing = any(t.missing_in for t in record.tensors)
    plan = plan_merge(scratch, store, record.model, plan_base, snaps, names, allow_missing, passes)
    plan = recorded_plan(plan, record, _SketchesRead(ctx, plan, setup.expert_commits, names))
    return PlannedMerge(plan, setup), unknown, store


class _SketchesRead:
    """The stored sketches a budget read, as it read them: each expert's sketch found as a merge
    finds it, the recorded prefix taken, and its blocks checked against the record's (a sketch
    replaced since, `mgit sketch --force`, would compute another merge)."""

    def __init__(self, ctx: Context, plan: MergePlan, commits: list[str], names: list[str]):
        self.ctx, self.commits, self.names = ctx, commits, names
        self.base = {tp.name: tp.base for tp in plan.tensors}
        self.offers: dict[int, dict[str, SketchOffer]] = {}

    def __call__(self, tp: TensorPlan, k: int, note: dict[str, Any]) -> SketchUse:
        from mgit.ops import sketch as sketches

        if k not in self.offers:
            self.offers[k] = sketches.offers(self.ctx, self.commits[k], self.base)
        offer = self.offers[k].get(tp.name)
        gone = NotRecomputableError(
            f"the merge read {self.names[k]}'s sketch of tensor {tp.name!r}, which is no longer stored as it was "
            "(replaced by `mgit sketch --force`?); the merge cannot be computed again"
        )
        if offer is None or note.get("level") not in offer.sketch.ends():
            raise gone
        use = offer.use(note["level"], tuple(note.get("chunks", ())))
        if [c.id for m in use.manifests() for c in m.chunks] != note.get("blocks"):
            raise gone
        return use


def _recompute(ctx: Context, planned: PlannedMerge, scratch: ScratchGraph, store: ChunkStore) -> dict[str, Entry]:
    """The merged files' entries, computed by the merge engine into the scratch graph (their
    trees and manifests are held there) from inputs read from ``store``, over a store that keeps
    nothing."""
    from mgit.merge.engine import execute  # imports torch only for the chunks that need it
    from mgit.merge.io import MergeIO
    from mgit.merge.scratch import HashingStore
    from mgit.model.ingest import Ingestor

    io = merge_io(ctx)
    io = MergeIO(scratch, store, io.pool, io.price)
    total = sum(tp.base.nbytes for tp in planned.plan.tensors)
    with byte_progress("verify", total) as bar, ctx.store.random_reads():
        ingestor = Ingestor(scratch, HashingStore(ctx.store.root), io.pool, bar)
        run = execute(planned, io, ingestor, bar)
    return run.files


def _compare(
    graph: Graph, scratch: Graph, recorded: Snapshot, merged: Snapshot, files: dict[str, Entry]
) -> tuple[int, int, list[Difference]]:
    """(tensors compared, chunks compared, differences): the recomputed merge (``merged``: the
    starting snapshot's files with the merged ``files``) against the commit's snapshot, path by path."""
    from mgit.model.filetree import load_safetensors

    tensors = chunks = 0
    differences: list[Difference] = []
    for path in sorted(set(recorded) | set(merged)):
        theirs, mine = recorded.get(path), merged.get(path)
        if path in files and theirs is not None and theirs.kind == "safetensors":
            stored = load_safetensors(graph, theirs.oid, path)
            remade = load_safetensors(scratch, files[path].oid, path)
            tensors += len(stored.manifests)
            chunks += sum(len(m.chunks) for m in stored.manifests.values())
            differences += _file_differences(path, stored, remade)
        elif theirs != mine:
            differences.append(Difference("file", path, recorded=_oid(theirs), recomputed=_oid(mine)))
    return tensors, chunks, differences


def _oid(entry: Entry | None) -> str | None:
    return None if entry is None else entry.oid


def _file_differences(path: str, stored: StoredSafetensors, remade: StoredSafetensors) -> list[Difference]:
    """Where one merged safetensors file differs: each tensor's first differing chunk (or its
    layout), in the commit's tensor order; else its header (metadata, order)."""
    out = []
    names = list(stored.manifests) + [n for n in remade.manifests if n not in stored.manifests]
    for name in names:
        a, b = stored.manifests.get(name), remade.manifests.get(name)
        if a is None or b is None or (a.dtype, a.shape, len(a.chunks)) != (b.dtype, b.shape, len(b.chunks)):
            out.append(Difference("layout", path, name, recorded=_layout(a), recomputed=_layout(b)))
            continue
        differing = [i for i, (x, y) in enumerate(zip(a.chunks, b.chunks, strict=True)) if x.id != y.id]
        if differing:
            i = differing[0]
            out.append(Difference("chunk", path, name, i, a.chunks[i].id, b.chunks[i].id))
    if not out and stored.layout != remade.layout:
        out.append(Difference("header", path))
    return out


def _layout(m: TensorManifest | None) -> str | None:
    return None if m is None else f"{m.dtype}{list(m.shape)} in {len(m.chunks)} chunk(s)"
