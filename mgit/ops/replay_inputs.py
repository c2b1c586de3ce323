"""The inputs of a merge rebuilt from its plan record for ``merge --verify``, where they are
more than its recorded commits: a `slices:` merge's output tensors over the source tensors each
one names (and its config.json and shard index written again from the recorded config), a
tokenizer merge's embedding rows moved to the merged vocabulary again from the inputs (the
aligned chunks the merge stored are no commit's: gc may have dropped them). Nothing is written:
what is rebuilt lives in the verification's scratch graph and in memory (mgit.merge.scratch).
Whatever the record does not say, or the repository no longer holds, is refused in one line
(NotRecomputableError)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from mgit.context import Context
from mgit.errors import BadInputError, MgitError, NotRecomputableError
from mgit.graph.snapshot import Snapshot

if TYPE_CHECKING:
    from mgit.graph.objects import Graph
    from mgit.merge.config import MergeConfig
    from mgit.merge.plan import MergePlan
    from mgit.merge.record import PlanRecord
    from mgit.merge.request import MergeSetup
    from mgit.model.manifest import TensorManifest
    from mgit.store.chunkstore import ChunkStore


def input_snapshot(ctx: Context, record: PlanRecord, commit: str, name: str) -> Snapshot:
    """An input's snapshot, or one line saying it is not here (a MODEL+LORA input: which model
    and adapter its applied commit was; applying the adapter again would make another commit,
    so the recorded one is needed: it is one of the merge commit's parents)."""
    if ctx.graph.has(commit):
        return ctx.snapshot(commit)
    applied = next((x for x in record.lora or () if x.get("commit") == commit), None)
    if applied is not None:
        raise NotRecomputableError(
            f"input {name} is {str(applied.get('model'))[:12]} with a LoRA adapter applied, commit {commit[:12]}, "
            "which this repository does not hold; fetch the merge commit's history again (its parents) to verify it"
        )
    raise NotRecomputableError(f"input {name}'s commit {commit[:12]} is not in this repository")


def recorded_config(record: PlanRecord) -> MergeConfig:
    """The merge's config, as the record holds it."""
    from mgit.merge.config import parse_config

    if record.config is None:
        raise NotRecomputableError("the plan record holds no merge config to rebuild the merge's inputs from")
    try:
        return parse_config(record.config, "the plan record's config")
    except MgitError as exc:
        raise NotRecomputableError(f"the plan record's config cannot be read again: {exc}") from None


def sliced(ctx: Context, record: PlanRecord, setup: MergeSetup, passes: int) -> MergePlan:
    """A `slices:` merge's plan (mgit.merge.replay.sliced_plan), with the files it rewrites
    (config.json, the shard index) made again from its config and the donor's files it drops."""
    from mgit.merge.plan import model_tensors
    from mgit.merge.replay import recorded_sources, sliced_plan
    from mgit.ops.merge_planning import merge_io
    from mgit.ops.merge_slices import rewritten_files

    parsed: dict[str, TensorManifest] = {}
    names = {commit: model for model, commit in recorded_sources(record).items()}
    snaps = {commit: input_snapshot(ctx, record, commit, model) for commit, model in names.items()}
    held: dict[str, dict[str, TensorManifest]] = {}

    def tensors_of(commit: str) -> dict[str, TensorManifest]:
        if commit not in held:
            held[commit] = model_tensors(ctx.graph, snaps[commit], record.model, parsed)[1]
        return held[commit]

    plan = sliced_plan(record, tensors_of, merge_io(ctx).price, passes)
    cfg = recorded_config(record)
    if cfg.slices is None:
        raise NotRecomputableError("the plan record names each tensor's sources, but its config has no `slices:`")
    by_model = {model: snaps[commit] for commit, model in names.items()}
    lacking = sorted({s.sources[0].model for s in cfg.slices} - set(by_model))
    if lacking:
        raise NotRecomputableError(f"the plan record names no commit of source {lacking[0]}")
    plan.rewritten = rewritten_files(ctx, cfg, setup, by_model, record.model, plan)
    donor = model_tensors(ctx.graph, setup.base_snap, record.model, parsed)[0]
    plan.dropped = tuple(f for f in donor if f not in plan.files)
    return plan


class _ScratchContext(Context):
    """The repository as a verification rebuilds inputs in it: its graph and store those of the
    scratch (written to memory only), no lock taken, the rest shared with ``ctx``."""

    def __init__(self, ctx: Context, graph: Graph, store: ChunkStore):  # not super().__init__: that opens it again
        vars(self).update(vars(ctx))
        self.graph, self._store = graph, store

    @contextmanager
    def writing(self) -> Iterator[None]:
        yield


def vocabulary(
    ctx: Context, record: PlanRecord, setup: MergeSetup, snaps: list[Snapshot], graph: Graph, store: ChunkStore
) -> tuple[Snapshot, list[Snapshot], Snapshot]:
    """A tokenizer merge's inputs again (mgit.ops.merge_vocab.prepare, into ``graph`` and
    ``store``, the scratch; ``snaps``: the experts' as committed): the snapshot the plan takes as
    its base, the experts' and the merged model's starting snapshot (its tokenizer files and
    config.json). A vocabulary that comes out otherwise than recorded (another transformers?) is
    refused."""
    from mgit.ops import merge_vocab

    cfg = recorded_config(record)
    names = setup.expert_names
    scratch = _ScratchContext(ctx, graph, store)
    try:
        plan_base, aligned, output, made = merge_vocab.prepare(
            scratch, cfg, record.model, setup.base_commit, record.reference, setup.base_snap, names, snaps, setup.dtype
        )
    except BadInputError as exc:  # no transformers here, a tokenizer file it cannot load: not a verdict
        raise NotRecomputableError(f"the merged vocabulary cannot be built again: {exc}") from None
    made = json.loads(json.dumps(made))  # as the record holds it (lists, not tuples)
    if made != record.tokenizer:
        differ = sorted(
            k for k in set(made) | set(record.tokenizer or {}) if made.get(k) != (record.tokenizer or {}).get(k)
        )
        raise NotRecomputableError(
            f"the merged vocabulary comes out otherwise than recorded ({', '.join(differ)}): "
            "the tokenizer libraries differ from those that made the merge?"
        )
    return plan_base, aligned, output
