"""Merges as commits: plan (from manifests alone), budget, fetch in a partial clone, execute,
commit and install in the working tree, journaled. The layers below do the work: mgit.merge
(request, plan, budget, engine, record), the model and store layers. Merge inputs that are
directories are mgit.ops.merge_inputs; the records merges leave, mgit.ops.lineage."""

from __future__ import annotations

import dataclasses
import functools
import os
import secrets
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from mgit.budget import parse_budget
from mgit.context import Context
from mgit.errors import BadInputError, MgitError, RefUpdateError
from mgit.graph import records
from mgit.graph.refs import check_ref_name
from mgit.graph.snapshot import Snapshot, write_snapshot
from mgit.model.ingest import Ingestor
from mgit.model.materialize import ChunkSource, StagedFile
from mgit.ops import checkout, inspect, merge_inputs, workfiles
from mgit.ops.ancestry import is_branch_merge
from mgit.ops.checkout import local_file
from mgit.ops.stage import parent_lookup
from mgit.ops.workfiles import CheckoutResult
from mgit.progress import byte_progress
from mgit.remote.transfer import Transfer
from mgit.version import __version__
from mgit.worktree import journal
from mgit.worktree.journal import Journal, Write
from mgit.worktree.sparse import load_patterns

if TYPE_CHECKING:  # mgit.merge is imported where used: commands that do not merge skip it
    from mgit.merge.execution import Execution
    from mgit.merge.plan import MergePlan
    from mgit.merge.request import MergeRequest, MergeSetup


def _with_model(head: Snapshot, reference: Snapshot, model_dir: str) -> Snapshot:
    """HEAD's files with its model directory replaced by the reference's: what a merge without
    a base starts from (its model, config and tokenizer are the first expert's; the files
    beside the model stay the branch's)."""

    def in_model(path: str) -> bool:
        return not model_dir or path.startswith(model_dir + "/")

    return {p: e for p, e in head.items() if not in_model(p)} | {p: e for p, e in reference.items() if in_model(p)}


def merge(
    ctx: Context,
    experts: Sequence[str],
    method: str,
    base: str | None = None,
    *,
    branch: str | None = None,
    message: str | None = None,
    seed: int | None = None,
    dtype: str | None = None,
    out_dtype: str | None = None,
    model: str | None = None,
    allow_missing: bool = False,
    config: str | os.PathLike[str] | None = None,
    budget: str | int | None = None,
    budget_select: str = "importance",
    budget_fairness: str = "per-expert",
    budget_sketches: bool = True,
    sketch_missing: str | float | None = None,
    checkout: bool = True,
    **params: Any,
) -> str:
    """Merge expert revisions into ``base`` (default HEAD) as a commit with parents
    [base, *experts] holding the merged model and its plan; returns the commit id.

    On HEAD the current branch advances; on another base ``branch`` is required and
    created. Either way the working tree then holds the merged model; with
    ``checkout=False`` (``branch`` required) the branch is created and the working tree,
    the index and HEAD stay as they are (many candidate merges, none written out). Parameters are
    mergekit's (weight, density, lambda, normalize, rescale, epsilon, gamma, t, ...).
    With ``config`` (a mergekit YAML file) method, base, experts and parameters come
    from it instead, with per-tensor filters and per-layer gradients. With ``budget``
    (``"2GB"``, ``"10%"``, an int of bytes) expert chunk reads stay within it, the most important
    chunks chosen first (``budget_select="uniform"``: at random, for comparisons), each expert's
    share of the budget spent on its own chunks first, so no expert is starved by others' larger
    deltas (``budget_fairness="global"``: all experts' chunks ranked together). Under a budget, an expert's stored
    sketch (``Repository.sketch``) may be read instead of its exact chunks where that captures
    more of the merge (``budget_sketches=False``: exact chunks only); ``sketch_missing`` (a share)
    first sketches, against the base, every expert that has no sketch (each read whole once,
    outside the budget; the plan counts them).
    """
    from mgit.merge.methods.registry import get_method
    from mgit.merge.request import MergeRequest

    request = MergeRequest(
        tuple(experts), method, base, params, model, allow_missing, config, budget, budget_select,
        seed=seed, dtype=dtype, out_dtype=out_dtype, budget_fairness=budget_fairness,
        budget_sketches=budget_sketches, sketch_missing=sketch_missing,
    )  # fmt: skip
    cfg = request.check()  # bad input refused before torch loads
    refuse_undoing_head(ctx, experts, base, config)
    if seed is None:  # deterministic methods need none: keep their commits reproducible
        named = cfg.method if cfg is not None else method
        request = dataclasses.replace(request, seed=secrets.randbits(31) if get_method(named).random else 0)
    plan, setup = resolve_plan(ctx, request)
    from mgit.merge.engine import execute  # imports torch only for the chunks that need it

    base = setup.base_ref
    on_head = setup.base_commit == ctx.refs.head() and base in (None, "HEAD", ctx.refs.current_branch())
    if not checkout and not branch:
        raise BadInputError("a merge that is not checked out goes on a new branch: give -b NAME")
    if not on_head and not branch:
        raise BadInputError("merging into a base other than HEAD needs -b NAME for the new branch")
    if branch is not None:
        check_ref_name(branch, "branch")
        if branch in ctx.refs.branches():
            raise BadInputError(f"branch {branch!r} already exists")
        ctx.refs.refuse_clash(f"refs/heads/{branch}")  # before any work: one line
    with ctx.writing():
        _refuse_stale_base(ctx, setup.base_commit, on_head, branch)
        if checkout:  # a merge left on its branch touches nothing of the working tree
            inspect.refuse_dirty(ctx, "merge")
        base_snap = setup.base_snap
        bar_total = sum(tp.base.nbytes for tp in plan.tensors)
        staging = ctx.clear_staging()
        index = ctx.index()

        in_place = workfiles.in_place(ctx, "merge.inPlace")

        def stage_file(file: str, header: bytes, size: int) -> StagedFile:
            local = ChunkSource(ctx.store, local_file(ctx, index, file))  # unchanged chunks: copied from it
            return StagedFile(ctx.root / file, staging, header, size, local, in_place)

        fetched = {"base": Transfer(), "experts": Transfer()}
        if ctx.is_partial:
            _fetch_planned(ctx, plan, setup, fetched)
        # A merge reads chosen chunks scattered over the packs: each record exactly, without the
        # mapping's read-ahead into its neighbours (measured: 5.8x the planned bytes from disk).
        with byte_progress("merge", bar_total) as bar, ctx.store.random_reads():
            ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool, bar, parent_lookup(ctx, base_snap))
            run = execute(plan, setup, ingestor, ctx.store, ctx.pool, base_snap, bar, stage_file if checkout else None)
        if ctx.is_partial:
            run.base_bytes_fetched, run.expert_bytes_fetched = fetched["base"].bytes, fetched["experts"].bytes
        try:
            return _commit_merge(ctx, plan, setup, run, base, branch, on_head, message, checkout)
        finally:
            for staged in run.staged.values():
                staged.discard()  # those not installed


def refuse_undoing_head(
    ctx: Context, experts: Sequence[str], base: str | None, config: str | os.PathLike[str] | None
) -> None:
    """A model merge of one revision HEAD is not strictly behind, over HEAD by default, would
    undo HEAD's own changes (mgit.ops.ancestry.is_branch_merge): refused unless the base is
    named, pointing to the branch merge whose method settles conflicts instead."""
    if base is None and config is None and is_branch_merge(ctx, experts):
        rev = experts[0]
        raise BadInputError(
            f"{rev} is not ahead of HEAD, so a model merge over HEAD would undo HEAD's own changes: merge the "
            f"branch (mgit merge {rev} --method ...; Repository.merge_branch), or name the base (--base HEAD)"
        )


def _refuse_stale_base(ctx: Context, base_commit: str, on_head: bool, branch: str | None) -> None:
    """Under the lock, before any write: the plan was made from HEAD (and the new branch
    was free) when no lock was held; another command may have moved them since."""
    head = ctx.refs.head()
    if on_head and head != base_commit:
        raise RefUpdateError(
            f"HEAD moved to {str(head)[:12]} while this merge was being planned (from {base_commit[:12]}); "
            "nothing was changed, run it again"
        )
    if branch is not None and branch in ctx.refs.branches():
        raise BadInputError(f"branch {branch!r} already exists")


def _commit_merge(
    ctx: Context,
    plan: MergePlan,
    setup: MergeSetup,
    run: Execution,
    base: str | None,
    branch: str | None,
    on_head: bool,
    message: str | None,
    checkout_after: bool = True,
) -> str:
    """Record an executed merge: seal chunks, write tree and commit, then update the
    working tree (from the staged files) and the refs (without ``checkout_after``: only
    create the branch)."""
    from mgit.merge.record import plan_record

    base_snap = setup.base_snap
    merged = dict(base_snap) | run.files
    record = plan_record(plan, setup, run, __version__)
    extra = records.stats_entries(ctx.graph, run.stats) + records.plan_entries(ctx.graph, record)
    ctx.store.seal()
    tree = write_snapshot(ctx.graph, merged, extra)
    text = message or f"merge {', '.join(setup.expert_names)} into {base or 'HEAD'} ({setup.method.name})"
    who = ctx.identity()
    parents = [setup.base_commit, *setup.expert_commits]
    commit = ctx.graph.put_commit(tree, parents, text, who, who)
    if not checkout_after:
        assert branch is not None
        ctx.refs.create_branch(branch, commit)
    elif on_head and branch is None:
        head_snap = base_snap if setup.reference is None else ctx.snapshot(setup.base_commit)
        reflog = f"merge: {text.splitlines()[0]}"
        install_merge(ctx, commit, head_snap, merged, setup.base_commit, reflog, staged=run.staged)
    else:
        assert branch is not None
        # journaled: a killed run's branch is checked out by the next command
        pending = Journal("merge", branch, commit, head="create", branch=branch, switch_after=True)
        journal.save(ctx.git_dir, pending)
        ctx.refs.create_branch(branch, commit)
        try:
            checkout.switch(ctx, branch, None, force=False, staged=run.staged)
        except MgitError:
            left = journal.load(ctx.git_dir)
            if left is not None and left.op == "merge":  # refused before writing anything
                journal.clear(ctx.git_dir)
            raise
    return commit


def install_merge(
    ctx: Context,
    commit: str,
    head_snap: Snapshot,
    merged: Snapshot,
    old_head: str | None,
    reflog: str,
    *,
    staged: dict[str, StagedFile] | None = None,
    op: str = "merge",
    rev: str = "HEAD",
) -> None:
    """Move the current branch (from ``old_head``, whose files are ``head_snap``) to the merge
    ``commit``, then bring the working tree and index to it, journaled: every working file's new
    bytes are prepared out of sight first (a corrupt chunk stops the merge there, the branch
    unmoved), then the branch moves (a lost compare-and-swap leaves tree and index as they
    were), then the files go into place; a killed run's working tree is finished by the next
    command. Files of HEAD the merge's tree lacks (a no-base merge's tree is the first
    expert's; a three-way merge's deletions) go, as a checkout of the merge would remove them.
    A three-way merge (mgit.ops.threeway) and a fast-forward install theirs the same way
    (``op`` and ``rev`` name the operation in the journal's messages)."""
    index = ctx.index()
    patterns = load_patterns(ctx.git_dir)
    changes = {p: e for p, e in merged.items() if head_snap.get(p) != e}
    forms = {p: workfiles.form(ctx, e, p, patterns) for p, e in changes.items()}
    plan = Journal(
        op, rev, commit, writes={p: Write(e, forms[p].entry, forms[p].written) for p, e in changes.items()},
        removes=sorted(set(head_snap) - set(merged)), head="advance", old_head=old_head, message=reflog,
    )  # fmt: skip

    def advance() -> None:  # once every working file is prepared, before the first one changes
        ctx.refs.advance_head(old_head, commit, reflog)  # a lost swap: write_files clears the journal

    result = CheckoutResult(commit)
    checkout.write_files(
        ctx, index, changes, result, staged, forms, plan=plan, before_first_change=advance, in_place_key="merge.inPlace"
    )
    workfiles.complete(ctx, plan, index, result)


def merge_plan(
    ctx: Context,
    experts: Sequence[str],
    method: str,
    base: str | None = None,
    *,
    model: str | None = None,
    allow_missing: bool = False,
    config: str | os.PathLike[str] | None = None,
    budget: str | int | None = None,
    budget_select: str = "importance",
    explain: bool = False,
    seed: int = 0,
    dtype: str | None = None,
    out_dtype: str | None = None,
    budget_fairness: str = "per-expert",
    budget_sketches: bool = True,
    sketch_missing: str | float | None = None,
    **params: Any,
) -> tuple[MergePlan, MergeSetup]:
    """What a merge would read, from manifests alone (``mgit merge --dry-run``); with a
    ``budget`` (or ``explain``) also which expert chunks are worth reading (``plan.budget``),
    which may analyze chunk pairs no commit recorded (counted apart)."""
    from mgit.merge.request import MergeRequest

    if sketch_missing is not None:
        raise BadInputError("--sketch-missing stores sketches: not with --dry-run or --explain (run `mgit sketch`)")
    refuse_undoing_head(ctx, experts, base, config)
    request = MergeRequest(
        tuple(experts), method, base, params, model, allow_missing, config, budget, budget_select, explain,
        seed, dtype, out_dtype, budget_fairness, budget_sketches, sketch_missing,
    )  # fmt: skip
    return resolve_plan(ctx, request)


def resolve_plan(ctx: Context, request: MergeRequest) -> tuple[MergePlan, MergeSetup]:
    """The request resolved into a setup, and the plan (restricted when budgeted). In a partial
    clone under the lock: pricing and analysis may fetch chunks, published when done."""
    with ctx.reading():
        return _resolve_plan(ctx, request)


def _resolve_plan(ctx: Context, request: MergeRequest) -> tuple[MergePlan, MergeSetup]:  # noqa: C901 (a config's or the options' merge, each checked)
    from mgit.merge.config import num_layers, tensor_parameters
    from mgit.merge.methods.registry import get_method
    from mgit.merge.plan import model_tensors, plan_merge
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
    base_commit = merge_inputs.merge_input(ctx, base or "HEAD", None)  # the first parent
    reference = None
    if not chosen.needs_base and base is None:  # nothing of HEAD is used: the first expert is the reference
        first = cfg.models[0].ref if cfg is not None else next(iter(experts), None)
        if first is None:
            raise BadInputError("name at least one expert revision to merge")
        reference = merge_inputs.merge_input(ctx, first, None)
    base_snap = ctx.snapshot(reference or base_commit)
    model_dir, _ = inspect.pick_model(ctx, base_snap, request.model)
    if reference is not None:
        base_snap = _with_model(ctx.snapshot(base_commit), base_snap, model_dir)
    params_for = None
    if cfg is not None:
        entries = [m for m in cfg.models if not (chosen.needs_base and m.ref == cfg.base)]
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
        reference if k == 0 and reference else merge_inputs.merge_input(ctx, e, model_dir)
        for k, e in enumerate(experts)
    ]
    snaps = [ctx.snapshot(c) for c in expert_commits]
    passes = 2 if chosen.decides_per_expert else 1
    plan = plan_merge(ctx.graph, ctx.store, model_dir, base_snap, snaps, list(experts), allow_missing, passes)
    if ctx.promisor is not None:  # price the chunks not here at what fetching them costs
        sizes = _fetch_sizes(ctx, plan)
        plan = plan_merge(
            ctx.graph, ctx.store, model_dir, base_snap, snaps, list(experts), allow_missing, passes,
            ctx.promisor.pricing(sizes),
        )  # fmt: skip
        plan.fetch_sizes = sizes
    if params_for is not None:  # every tensor's parameters must resolve before anything is written
        for tp in plan.tensors:
            chosen.check_params(chosen.resolve(params_for(tp.name), len(experts)), f"{config}: tensor {tp.name}")
    setup = MergeSetup(
        chosen, resolved, base_commit, expert_commits, list(experts), base_snap,
        base_ref=base, params_for=params_for, config=cfg.source if cfg else None,
        dtype=request.dtype or (cfg.dtype if cfg else None),
        out_dtype=request.out_dtype or (cfg.out_dtype if cfg else None),
        reference=reference, seed=request.seed or 0,
    )  # fmt: skip
    if request.wants_budget:
        computed = 0
        if request.sketch_missing is not None and request.budget_sketches:
            computed = _sketch_missing(ctx, setup, request.sketch_missing, model_dir)
        plan = _plan_budget(
            ctx, plan, setup, request.budget, request.budget_select, request.budget_fairness, request.budget_sketches
        )
        if plan.budget is not None:
            plan.budget.sketches_computed = computed
    return plan, setup


def _fetch_sizes(ctx: Context, plan: MergePlan) -> dict[str, int]:
    """Record sizes on the remote of the base and candidate expert chunks not here (one batch)."""
    wanted = [c.id for tp in plan.tensors for c in tp.base.chunks]
    wanted += [tp.experts[k].chunks[i].id for tp in plan.tensors for k, r in enumerate(tp.reads) for i in r]
    assert ctx.promisor is not None
    return ctx.promisor.sizes(wanted)


def _fetch_planned(ctx: Context, plan: MergePlan, setup: MergeSetup, run_report: dict[str, Transfer]) -> None:
    """A partial clone fetches what the merge reads before it runs: the base's chunks it
    computes from (not those it carries), then the chosen expert chunks, the latter capped at
    the budget."""
    from mgit.merge.carry import carried_chunks

    assert ctx.promisor is not None
    base_ids = []
    for tp in plan.tensors:
        carried = carried_chunks(tp, setup)
        base_ids += [c.id for i, c in enumerate(tp.base.chunks) if i not in carried]
    expert_ids = [tp.experts[k].chunks[i].id for tp in plan.tensors for k, reads in enumerate(tp.reads) for i in reads]
    for tp in plan.tensors:  # the chosen sketches' factor blocks
        uses = [u for u in tp.sketches if u is not None]
        expert_ids += [c.id for u in uses for m in u.manifests() for c in m.chunks]
    limit = plan.budget.limit if plan.budget is not None else None
    ctx.promisor.fetch_for_merge(
        base_ids, expert_ids, limit, plan.fetch_sizes, run_report["base"], run_report["experts"]
    )


def _plan_budget(
    ctx: Context,
    plan: MergePlan,
    setup: MergeSetup,
    budget: str | int | None,
    select: str,
    fairness: str = "global",
    sketches: bool = True,
) -> MergePlan:
    """``plan`` restricted to the expert chunks a budget affords (and, with ``sketches``, the
    experts' stored sketches instead of chunks where that captures more), a new plan carrying
    its report (see mgit.merge.budget)."""
    from mgit.merge.budget.analyze import pair_norms
    from mgit.merge.budget.restrict import restrict
    from mgit.store.paircache import PairCache

    given = parse_budget(budget) if budget is not None else None
    full = plan.expert_bytes
    limit = given.resolve(full) if given is not None else None
    # analysis never reads more than the merge it plans: at most the budget, at most a full merge
    price = ctx.promisor.pricing(plan.fetch_sizes) if ctx.promisor is not None else ctx.store.read_cost
    analysis = pair_norms(
        ctx.graph, ctx.store, ctx.pool, PairCache(ctx.git_dir / "cache" / "pair-norms.sqlite"),
        plan, setup.reference or setup.base_commit, setup.expert_commits, functools.partial(inspect.commit_stats, ctx),
        full if limit is None else min(limit, full), price,
    )  # fmt: skip
    offers = _sketch_offers(ctx, plan, setup) if sketches and limit is not None else {}
    restricted, _ = restrict(
        plan, setup.method, lambda tp: setup.resolved_params(tp.name), analysis,
        given=str(budget) if budget is not None else None, limit=limit, select=select, seed=setup.seed,
        dtypes=(setup.dtype, setup.out_dtype), fairness=fairness, offers=offers,
    )  # fmt: skip
    return restricted


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
