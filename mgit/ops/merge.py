"""Merges as commits: a request (built once, by ``mgit merge`` or from Repository.merge's
arguments) planned (mgit.ops.merge_planning), fetched in a partial clone, executed, committed and
installed in the working tree, journaled. The layers below do the work: mgit.merge (request,
plan, budget, engine, record), the model and store layers. Merge inputs that are directories are
mgit.ops.merge_inputs; the records merges leave, mgit.ops.lineage."""

from __future__ import annotations

import dataclasses
import os
import secrets
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from mgit.context import Context
from mgit.errors import BadInputError, MgitError, RefUpdateError
from mgit.graph import records
from mgit.graph.refs import check_ref_name
from mgit.graph.snapshot import Snapshot, write_snapshot
from mgit.model.ingest import Ingestor
from mgit.model.materialize import ChunkSource, StagedFile
from mgit.ops import checkout, inspect, workfiles
from mgit.ops.ancestry import is_branch_merge
from mgit.ops.checkout import local_file
from mgit.ops.merge_planning import merge_io, resolve_plan
from mgit.ops.stage import parent_lookup
from mgit.ops.workfiles import CheckoutResult
from mgit.progress import byte_progress
from mgit.remote.transfer import Transfer
from mgit.worktree import journal
from mgit.worktree.journal import Journal, Write
from mgit.worktree.sparse import load_patterns

if TYPE_CHECKING:  # mgit.merge is imported where used: commands that do not merge skip it
    from mgit.merge.execution import Execution
    from mgit.merge.plan import MergePlan
    from mgit.merge.preflight import MergeCheck
    from mgit.merge.record import PlannedMerge
    from mgit.merge.request import MergeRequest, MergeSetup


def merge(
    ctx: Context,
    experts: Sequence[str],
    method: str,
    base: str | None = None,
    *,
    branch: str | None = None,
    message: str | None = None,
    seed: int | None = None,
    rng: str = "mgit",
    dtype: str | None = None,
    out_dtype: str | None = None,
    model: str | None = None,
    allow_missing: bool = False,
    allow_crimes: bool = False,
    config: str | os.PathLike[str] | None = None,
    budget: str | int | None = None,
    budget_select: str = "importance",
    budget_fairness: str = "per-expert",
    budget_sketches: bool = True,
    sketch_missing: str | float | None = None,
    checkout: bool = True,
    **params: Any,
) -> str:
    """Merge expert revisions into a base as a commit holding the merged model and its plan.

    The commit's parents are [base, *experts]; its plan record (``mgit.plan/1``) says how the
    model was made. On HEAD the current branch advances; on another base ``branch`` is created.
    Either way the working tree then holds the merged model (unless ``checkout`` is False).

    Args:
        experts: The expert revisions (or directories holding a model), in order; ``MODEL+LORA``
            is MODEL with a PEFT LoRA adapter (a revision, ``REV:DIR``, or a directory) applied.
        method: The merge method's name (``mgit merge --help`` lists them); None with ``config``.
        base: The base revision (default HEAD), or ``MODEL+LORA``. A method without a base (linear,
            passthrough) given none takes its dtypes, chunking and non-tensor files from the first expert.
        branch: A new branch to put the merge on; required off HEAD and with ``checkout=False``.
        message: The commit message (default: the experts, the base and the method).
        seed: Of random methods, recorded; None: 0 for deterministic methods, else drawn.
        rng: Where random methods draw from, recorded: ``"mgit"``, a stream per tensor (the same
            whatever order tensors run in), or ``"mergekit"``, the draws ``mergekit-yaml
            --random-seed SEED`` makes (its result, bit for bit, on the same inputs).
        dtype: The working dtype, a safetensors name such as ``"F32"`` (default: the inputs').
        out_dtype: The merged tensors' dtype, such as ``"BF16"``.
        model: The model directory, when a commit holds several.
        allow_missing: An expert lacking a tensor contributes the base's (else refused).
        allow_crimes: Merge inputs whose config.json architectures differ (mergekit's ``--allow-crimes``).
        config: A mergekit YAML file: method, base, experts and parameters come from it, with
            per-tensor filters and per-layer gradients.
        budget: A cap on expert chunk bytes read (or fetched): ``"2GB"``, ``"500MiB"``, ``"10%"``
            of a full merge's, or an int of bytes; the most important chunks are chosen first.
        budget_select: ``"importance"``, or ``"uniform"`` (at random, seeded; for comparisons).
        budget_fairness: ``"per-expert"``: each expert's share of the budget goes to its own
            chunks first, so none is starved by others' larger deltas; ``"global"``: all ranked together.
        budget_sketches: Under a budget, read an expert's stored sketch (``Repository.sketch``)
            instead of its exact chunks where that captures more (False: exact chunks only).
        sketch_missing: A share (``"10%"``): first sketch, against the base, every expert without
            a sketch (each read whole once, outside the budget; the plan counts them). Needs ``budget``.
        checkout: False: create ``branch`` only; the working tree, the index and HEAD stay as they
            are (many candidate merges, none written out).
        **params: The method's mergekit parameters (weight, density, lambda, normalize, rescale,
            epsilon, gamma, t, ...): one value for every expert, or a list with one per expert.

    Returns:
        The merge commit's id.

    Raises:
        BadInputError: A method, parameter, value, config, budget or branch mgit refuses (the
            subclasses UnknownMethodError, UnknownParameterError); nothing was read.
        BudgetExceededError: A partial clone's fetch would exceed the budget; nothing changed.
        DirtyWorktreeError: The working tree has uncommitted changes the merge would overwrite.
        RefUpdateError: HEAD moved while the merge was planned; nothing changed.
    """
    return merge_with(ctx, request_of(locals()))


def merge_plan(
    ctx: Context,
    experts: Sequence[str],
    method: str,
    base: str | None = None,
    *,
    model: str | None = None,
    allow_missing: bool = False,
    allow_crimes: bool = False,
    config: str | os.PathLike[str] | None = None,
    budget: str | int | None = None,
    budget_select: str = "importance",
    explain: bool = False,
    seed: int = 0,
    rng: str = "mgit",
    dtype: str | None = None,
    out_dtype: str | None = None,
    budget_fairness: str = "per-expert",
    budget_sketches: bool = True,
    sketch_missing: str | float | None = None,
    **params: Any,
) -> PlannedMerge:
    """What a merge would read, from manifests alone (``mgit merge --dry-run``).

    Args:
        experts: The expert revisions (or directories holding a model, or ``MODEL+LORA``), in order.
        method: The merge method's name; None with ``config``.
        base: The base revision (default HEAD), as :func:`merge`'s.
        model: The model directory, when a commit holds several.
        allow_missing: An expert lacking a tensor contributes the base's (else refused).
        allow_crimes: Merge inputs whose config.json architectures differ, as :func:`merge`'s.
        config: A mergekit YAML file, as :func:`merge`'s.
        budget: A cap on expert chunk bytes to read (``"2GB"``, ``"10%"``, an int of bytes).
        budget_select: ``"importance"`` or ``"uniform"``, as :func:`merge`'s.
        explain: Rank the expert chunks (``plan.budget``) even without a budget, as ``--explain``.
        seed: Of random methods (0 by default here: a plan reads no random state).
        rng: ``"mgit"`` or ``"mergekit"``, as :func:`merge`'s (recorded in the plan).
        dtype: The working dtype, such as ``"F32"`` (default: the inputs').
        out_dtype: The merged tensors' dtype, such as ``"BF16"``.
        budget_fairness: ``"per-expert"`` or ``"global"``, as :func:`merge`'s.
        budget_sketches: Under a budget, an expert's stored sketch may stand for its chunks.
        sketch_missing: Refused: sketching writes (run ``Repository.sketch`` first).
        **params: The method's parameters, as :func:`merge`'s.

    Returns:
        The plan and the resolved request (it unpacks as ``plan, setup``); ``.record()`` is its
        plan record. With a ``budget`` (or ``explain``) the plan holds only the expert chunks
        worth reading, and its report; ranking them may analyze chunk pairs no commit recorded
        (counted apart).

    Raises:
        BadInputError: As :func:`merge`'s, and ``sketch_missing`` given.
    """
    return plan_with(ctx, request_of(locals()))


def merge_check(
    ctx: Context,
    experts: Sequence[str],
    method: str,
    base: str | None = None,
    *,
    model: str | None = None,
    allow_missing: bool = False,
    allow_crimes: bool = False,
    config: str | os.PathLike[str] | None = None,
    seed: int | None = None,
    dtype: str | None = None,
    out_dtype: str | None = None,
    **params: Any,
) -> MergeCheck:
    """A merge's pre-flight alone (``mgit merge --check``): the request and every input's
    manifests and config.json checked, no tensor data read, nothing merged.

    Args:
        experts: The expert revisions (or directories holding a model), in order.
        method: The merge method's name; None with ``config``.
        base: The base revision (default HEAD), as :func:`merge`'s.
        model: The model directory, when a commit holds several.
        allow_missing: An expert lacking a tensor contributes the base's (else refused).
        allow_crimes: Inputs whose config.json architectures differ pass, as :func:`merge`'s.
        config: A mergekit YAML file, as :func:`merge`'s.
        seed: Of random methods, as :func:`merge`'s (reported; 0 when not given).
        dtype: The working dtype, such as ``"F32"`` (checked: a floating dtype).
        out_dtype: The merged tensors' dtype, such as ``"BF16"`` (checked as ``dtype``).
        **params: The method's parameters, as :func:`merge`'s.

    Returns:
        What the merge would do: its inputs resolved to commits, the method, each input's
        parameters, the tensor count and the bytes a full merge reads.

    Raises:
        BadInputError: The first check that fails, in one line naming the input and the
            tensor or key (a method, parameter, config key, architecture, vocab size, shape,
            dtype or expert count mgit refuses).
    """
    return check_with(ctx, request_of(locals()))


def check_with(ctx: Context, request: MergeRequest) -> MergeCheck:
    """:func:`merge_check` of a request built whole (``mgit merge --check`` builds one): planned
    without a budget (a budget's analysis would read chunks), then summed up."""
    from mgit.merge.preflight import MergeCheck

    request.check()  # the budget's form too, though it is not planned here
    refuse_undoing_head(ctx, request.experts, request.base, request.config)
    unbudgeted = dataclasses.replace(request, budget=None, explain=False, sketch_missing=None)
    return MergeCheck.of(resolve_plan(ctx, unbudgeted))


def request_of(arguments: dict[str, Any]) -> MergeRequest:
    """The one adapter from :func:`merge` / :func:`merge_plan`'s arguments (their ``locals()``:
    each keyword is the request field of its name) to a request."""
    from mgit.merge.request import MergeRequest

    given = {k: v for k, v in arguments.items() if k not in ("ctx", "experts", "params")}
    return MergeRequest(experts=tuple(arguments["experts"]), params=arguments["params"], **given)


def merge_with(ctx: Context, request: MergeRequest) -> str:
    """:func:`merge` of a request built whole (``mgit merge`` builds one); returns the commit id."""
    from mgit.merge.methods.registry import get_method

    cfg = request.check()  # bad input refused before torch loads
    refuse_undoing_head(ctx, request.experts, request.base, request.config)
    if request.seed is None:  # deterministic methods need none: keep their commits reproducible
        named = cfg.method if cfg is not None else request.method
        assert named is not None  # check() refused a request naming neither a method nor a config
        request = dataclasses.replace(request, seed=secrets.randbits(31) if get_method(named).random else 0)
    planned = resolve_plan(ctx, request)
    from mgit.merge.engine import execute  # imports torch only for the chunks that need it

    plan, setup = planned
    branch, checkout = request.branch, request.checkout
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
            return StagedFile(ctx.root / file, file, staging, header, size, local, in_place)

        fetched = {"base": Transfer(), "experts": Transfer()}
        if ctx.is_partial:
            fetch_planned(ctx, plan, setup, fetched)
        io = merge_io(ctx)
        # A merge reads chosen chunks scattered over the packs: each record exactly, without the
        # mapping's read-ahead into its neighbours (measured: 5.8x the planned bytes from disk).
        with byte_progress("merge", bar_total) as bar, ctx.store.random_reads():
            ingestor = Ingestor(io.graph, io.store, io.pool, bar, parent_lookup(ctx, base_snap))
            run = execute(planned, io, ingestor, bar, stage_file if checkout else None)
        if ctx.is_partial:
            run = dataclasses.replace(
                run, base_bytes_fetched=fetched["base"].bytes, expert_bytes_fetched=fetched["experts"].bytes
            )
        try:
            return _commit_merge(ctx, planned, run, request, on_head)
        finally:
            for staged in run.staged.values():
                staged.discard()  # those not installed


def plan_with(ctx: Context, request: MergeRequest) -> PlannedMerge:
    """:func:`merge_plan` of a request built whole (``mgit merge --dry-run`` builds one)."""
    if request.sketch_missing is not None:
        raise BadInputError("--sketch-missing stores sketches: not with --dry-run or --explain (run `mgit sketch`)")
    refuse_undoing_head(ctx, request.experts, request.base, request.config)
    return resolve_plan(ctx, request)


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


def _commit_merge(ctx: Context, planned: PlannedMerge, run: Execution, request: MergeRequest, on_head: bool) -> str:
    """Record an executed merge: seal chunks, write tree and commit, then update the
    working tree (from the staged files) and the refs (without ``request.checkout``: only
    create the branch)."""
    from mgit.merge.plan import merged_files

    setup, branch = planned.setup, request.branch
    base_snap = setup.base_snap
    merged = merged_files(base_snap, planned.plan, run.files)
    record = planned.record(run).to_json()
    extra = records.stats_entries(ctx.graph, run.stats) + records.plan_entries(ctx.graph, record)
    ctx.store.seal()
    tree = write_snapshot(ctx.graph, merged, extra)
    named = f"merge {', '.join(setup.expert_names)} into {setup.base_ref or 'HEAD'} ({setup.method.name})"
    text = request.message or named
    who = ctx.identity()
    parents = [setup.base_commit, *setup.expert_commits]
    commit = ctx.graph.put_commit(tree, parents, text, who, who)
    if not request.checkout:
        assert branch is not None
        ctx.refs.create_branch(branch, commit)
    elif on_head and branch is None:
        # HEAD's own files: the base's, unless the merge starts from another model's or a tokenizer's
        own = setup.reference is None and setup.tokenizer is None
        head_snap = base_snap if own else ctx.snapshot(setup.base_commit)
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
        op,
        rev,
        commit,
        writes={p: Write(e, forms[p].entry, forms[p].written) for p, e in changes.items()},
        removes=sorted(set(head_snap) - set(merged)),
        head="advance",
        old_head=old_head,
        message=reflog,
    )

    def advance() -> None:  # once every working file is prepared, before the first one changes
        ctx.refs.advance_head(old_head, commit, reflog)  # a lost swap: write_files clears the journal

    result = CheckoutResult(commit)
    checkout.write_files(
        ctx, index, changes, result, staged, forms, plan=plan, before_first_change=advance, in_place_key="merge.inPlace"
    )
    workfiles.complete(ctx, plan, index, result)


def fetch_planned(
    ctx: Context,
    plan: MergePlan,
    setup: MergeSetup,
    run_report: dict[str, Transfer],
    made_here: Callable[[str], bool] | None = None,
) -> None:
    """A partial clone fetches what the merge reads before it runs: the base's chunks it
    computes from (not those it carries), then the chosen expert chunks, the latter capped at
    the budget. ``made_here``: chunks no remote holds, made for this run (``merge --verify``'s
    realigned tokenizer rows), not asked for."""
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
    if made_here is not None:
        base_ids = [c for c in base_ids if not made_here(c)]
        expert_ids = [c for c in expert_ids if not made_here(c)]
    limit = plan.budget.limit if plan.budget is not None else None
    ctx.promisor.fetch_for_merge(
        base_ids, expert_ids, limit, plan.fetch_sizes, run_report["base"], run_report["experts"]
    )
