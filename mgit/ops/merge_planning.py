"""A merge request resolved into a plan, from manifests alone: revisions to commits, the base or
the reference model, a config's per-tensor parameters, the plan priced (in a partial clone at
what fetching costs), then restricted to a budget (the experts sketched first when asked). Each
step makes a new value; nothing edits a plan once made."""

from __future__ import annotations

import dataclasses
import functools
from typing import TYPE_CHECKING, Any

from mgit.budget import parse_budget
from mgit.context import Context
from mgit.errors import BadInputError
from mgit.graph.snapshot import Snapshot
from mgit.ops import inspect, merge_inputs

if TYPE_CHECKING:  # mgit.merge is imported where used: commands that do not merge skip it
    from mgit.merge.config import MergeConfig
    from mgit.merge.io import MergeIO
    from mgit.merge.lora import LoraInput
    from mgit.merge.methods.base import MergeMethod
    from mgit.merge.plan import MergePlan
    from mgit.merge.record import PlannedMerge
    from mgit.merge.request import MergeRequest, MergeSetup


def merge_io(ctx: Context, fetch_sizes: dict[str, int] | None = None) -> MergeIO:
    """The repository as a merge reads it; ``fetch_sizes`` (a partial clone's record sizes on the
    remote) prices chunks not here at what fetching them costs."""
    from mgit.merge.io import MergeIO, Price

    price: Price = ctx.store.read_cost
    if ctx.promisor is not None and fetch_sizes is not None:
        price = ctx.promisor.pricing(fetch_sizes)
    return MergeIO(ctx.graph, ctx.store, ctx.pool, price)


def resolve_plan(ctx: Context, request: MergeRequest) -> PlannedMerge:
    """The request resolved into a setup, and the plan (restricted when budgeted). In a partial
    clone under the lock: pricing and analysis may fetch chunks, published when done."""
    with ctx.reading():
        return _resolve_plan(ctx, request)


def with_model(head: Snapshot, reference: Snapshot, model_dir: str) -> Snapshot:
    """HEAD's files with its model directory replaced by the reference's: what a merge without
    a base starts from (its model, config and tokenizer are the first expert's; the files
    beside the model stay the branch's)."""

    def in_model(path: str) -> bool:
        return not model_dir or path.startswith(model_dir + "/")

    return {p: e for p, e in head.items() if not in_model(p)} | {p: e for p, e in reference.items() if in_model(p)}


def _resolve_plan(ctx: Context, request: MergeRequest) -> PlannedMerge:  # noqa: C901 (a config's or the options' merge, each checked)
    from mgit.merge.config import num_layers, tensor_parameters
    from mgit.merge.methods.registry import get_method
    from mgit.merge.plan import model_tensors, plan_merge
    from mgit.merge.record import PlannedMerge
    from mgit.merge.request import MergeSetup

    cfg = request.check()  # bad input refused before torch loads
    experts, method, base, params = list(request.experts), request.method, request.base, dict(request.params)
    config, allow_missing = request.config, request.allow_missing
    if cfg is not None:
        if experts or params:
            raise BadInputError("with a merge config, name experts and parameters in the config only")
        method, base = cfg.method, cfg.base
    assert method is not None  # merge() and merge_plan() take a method's name; a config names one
    chosen = get_method(method)
    loras: list[LoraInput] = []  # the MODEL+LORA inputs, as applied
    base_commit = merge_inputs.merge_input(ctx, base or "HEAD", None, loras)  # the first parent
    reference = None
    if not chosen.needs_base and base is None:  # nothing of HEAD is used: the first expert is the reference
        first = cfg.first_model if cfg is not None else next(iter(experts), None)
        if first is None:
            raise BadInputError("name at least one expert revision to merge")
        reference = merge_inputs.merge_input(ctx, first, None, loras)
    base_snap = ctx.snapshot(reference or base_commit)
    model_dir, _ = inspect.pick_model(ctx, base_snap, request.model)
    if reference is not None:
        base_snap = with_model(ctx.snapshot(base_commit), base_snap, model_dir)
    if cfg is not None and cfg.slices is not None:  # layers assembled from ranges of the sources
        from mgit.ops.merge_slices import resolve_slices

        return resolve_slices(ctx, request, cfg, chosen, base_commit, reference, base_snap, model_dir, loras)
    params_for = None
    if cfg is not None:
        takes_base = chosen.needs_base or (chosen.base_optional and cfg.base is not None)
        entries = [m for m in cfg.models if not (takes_base and m.ref == cfg.base)]
        experts = [m.ref for m in entries]
        if not experts:
            raise BadInputError(f"{config}: no model to merge besides the base")
        names = list(model_tensors(ctx.graph, base_snap, model_dir)[1])
        params_for = tensor_parameters(chosen, cfg, entries, num_layers(names))
        params = params_for("")
    if not experts:
        raise BadInputError("name at least one expert revision to merge")
    resolved = chosen.resolve(params, len(experts)) if params_for is None else params
    chosen.check_params(resolved, chosen.name)  # with the defaults filled in (DELLA's epsilon)
    expert_commits = [
        reference if k == 0 and reference else merge_inputs.merge_input(ctx, e, model_dir, loras)
        for k, e in enumerate(experts)
    ]
    snaps = [ctx.snapshot(c) for c in expert_commits]
    plan_base, tokenizer = base_snap, None
    if cfg is not None and cfg.tokenizer is not None:  # rows moved to the merged vocabulary first
        if request.wants_budget:
            raise BadInputError(f"{config}: a tokenizer merge reads whole embeddings: not with --budget")
        from mgit.ops import merge_vocab

        dtype = request.dtype or cfg.dtype
        plan_base, snaps, base_snap, tokenizer = merge_vocab.prepare(
            ctx, cfg, model_dir, base_commit, reference, base_snap, experts, snaps, dtype
        )
    passes = 2 if chosen.decides_per_expert else 1
    io = merge_io(ctx)
    plan = plan_merge(io.graph, io.store, model_dir, plan_base, snaps, list(experts), allow_missing, passes)
    if ctx.promisor is not None:  # price the chunks not here at what fetching them costs
        sizes = _fetch_sizes(ctx, plan)
        io = merge_io(ctx, sizes)
        plan = plan_merge(
            io.graph, io.store, model_dir, plan_base, snaps, list(experts), allow_missing, passes, io.price
        )
        plan = dataclasses.replace(plan, fetch_sizes=sizes)
    if params_for is not None:  # every tensor's parameters must resolve before anything is written
        for tp in plan.tensors:
            chosen.check_params(chosen.resolve(params_for(tp.name), len(experts)), f"{config}: tensor {tp.name}")
    compared = ("the reference", experts[0]) if reference else ("the base", base or "HEAD")
    _preflight(ctx, chosen, plan, request, cfg, compared, base_snap, list(zip(experts, snaps, strict=True)))
    setup = MergeSetup(
        chosen,
        resolved,
        base_commit,
        expert_commits,
        list(experts),
        base_snap,
        base_ref=base,
        params_for=params_for,
        config=cfg.source if cfg else None,
        dtype=request.dtype or (cfg.dtype if cfg else None),
        out_dtype=request.out_dtype or (cfg.out_dtype if cfg else None),
        reference=reference,
        seed=request.seed or 0,
        request=request,
        loras=tuple(loras),
        tokenizer=tokenizer,
    )
    if request.wants_budget:
        computed = 0
        if request.sketch_missing is not None and request.budget_sketches:
            computed = _sketch_missing(ctx, setup, request.sketch_missing, model_dir)
        plan = _plan_budget(ctx, io, PlannedMerge(plan, setup), request, computed)
    return PlannedMerge(plan, setup)


def _preflight(
    ctx: Context,
    method: MergeMethod,
    plan: MergePlan,
    request: MergeRequest,
    cfg: MergeConfig | None,
    compared: tuple[str, str],
    base_snap: Snapshot,
    experts: list[tuple[str, Snapshot]],
) -> None:
    """The request against its inputs' headers and configs, before any tensor is read
    (mgit.merge.preflight); ``compared``: the role and name of the model the others are compared to
    (``base_snap``'s)."""
    from mgit.merge.preflight import Input, preflight, read_config

    base = Input(*compared, read_config(ctx.graph, base_snap, plan.model))
    inputs = [Input("expert", name, read_config(ctx.graph, snap, plan.model)) for name, snap in experts]
    dtypes = (request.dtype or (cfg.dtype if cfg else None), request.out_dtype or (cfg.out_dtype if cfg else None))
    merged_vocab = cfg is not None and cfg.tokenizer is not None and cfg.tokenizer.aligns
    preflight(method, plan, base, inputs, dtypes, request.allow_crimes, merged_vocab)


def _fetch_sizes(ctx: Context, plan: MergePlan) -> dict[str, int]:
    """Record sizes on the remote of the base and candidate expert chunks not here (one batch)."""
    wanted = [c.id for tp in plan.tensors for c in tp.base.chunks]
    wanted += [tp.experts[k].chunks[i].id for tp in plan.tensors for k, r in enumerate(tp.reads) for i in r]
    assert ctx.promisor is not None
    return ctx.promisor.sizes(wanted)


def _plan_budget(
    ctx: Context, io: MergeIO, planned: PlannedMerge, request: MergeRequest, sketches_computed: int
) -> MergePlan:
    """The plan restricted to the expert chunks the request's budget affords (and, with
    ``budget_sketches``, the experts' stored sketches instead of chunks where that captures
    more), a new plan carrying its report (see mgit.merge.budget)."""
    from mgit.merge.budget.analyze import pair_norms
    from mgit.merge.budget.restrict import restrict
    from mgit.store.paircache import PairCache

    plan, setup, budget = planned.plan, planned.setup, request.budget
    given = parse_budget(budget) if budget is not None else None
    full = plan.expert_bytes
    limit = given.resolve(full) if given is not None else None
    # analysis never reads more than the merge it plans: at most the budget, at most a full merge
    analysis = pair_norms(
        io.graph,
        io.store,
        io.pool,
        PairCache(ctx.git_dir / "cache" / "pair-norms.sqlite"),
        plan,
        setup.reference or setup.base_commit,
        setup.expert_commits,
        functools.partial(inspect.commit_stats, ctx),
        full if limit is None else min(limit, full),
        io.price,
    )
    offers = _sketch_offers(ctx, plan, setup) if request.budget_sketches and limit is not None else {}
    restricted, report = restrict(
        plan,
        setup.method,
        lambda tp: setup.resolved_params(tp.name),
        analysis,
        given=str(budget) if budget is not None else None,
        limit=limit,
        select=request.budget_select,
        seed=setup.seed,
        dtypes=(setup.dtype, setup.out_dtype),
        fairness=request.budget_fairness,
        offers=offers,
    )
    return dataclasses.replace(restricted, budget=dataclasses.replace(report, sketches_computed=sketches_computed))


def _sketch_offers(ctx: Context, plan: MergePlan, setup: MergeSetup) -> dict[tuple[int, int], Any]:
    """(tensor index, expert) → the expert's stored sketch of that tensor, where it is relative
    to the merge's base (mgit.ops.sketch) and the method takes sketched deltas."""
    from mgit.ops import sketch as sketches

    if not setup.method.accepts_sketches:
        return {}
    base = {tp.name: tp.base for tp in plan.tensors}
    where = {tp.name: t for t, tp in enumerate(plan.tensors)}
    price = None
    if ctx.promisor is not None:  # blocks not here cost what fetching them costs
        promisor = ctx.promisor

        def price(ids: list[str]) -> dict[str, int]:
            cost = promisor.pricing(promisor.sizes(ids))
            return {cid: cost(cid, set()) for cid in ids}

    out = {}
    for k, commit in enumerate(setup.expert_commits):
        for name, offer in sketches.offers(ctx, commit, base, price).items():
            t = where.get(name)
            if t is not None and plan.tensors[t].reads[k]:
                out[(t, k)] = offer
    return out


def _sketch_missing(ctx: Context, setup: MergeSetup, share: str | float, model_dir: str) -> int:
    """Sketch, against the merge's base, each expert that has no sketch yet; how many were made.
    An expert sketched against another parent keeps its sketch (the budget then reads its chunks)."""
    from mgit.ops import sketch as sketches

    made, kind = 0, sketches.configured_kind(ctx)
    base = setup.reference or setup.base_commit
    for commit in dict.fromkeys(setup.expert_commits):
        if sketches.find(ctx, commit) is None and commit != base:
            sketches.sketch(ctx, commit, against=base, share=share, kind=kind, model=model_dir or None)
            made += 1
    return made
