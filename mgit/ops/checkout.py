"""Checkout: switch to a revision (or a new branch there), restore paths from one, and write
entries into the working tree, journaled, within a budget (a partial clone fetches what it
lacks first, capped). Sparse checkouts: the patterns choose which tensors a file holds."""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Collection, Iterable, Mapping
from pathlib import Path

from dulwich.objects import ObjectID
from rich.filesize import decimal

from mgit import _crashpoints
from mgit.budget import Budget
from mgit.context import Context
from mgit.errors import BadInputError, BudgetExceededError, DirtyWorktreeError, MgitError
from mgit.graph import records
from mgit.graph.refs import check_ref_name
from mgit.graph.snapshot import Entry, Snapshot
from mgit.model.materialize import LocalChunks, StagedFile, entry_size, local_chunks, prepare_entry, store_reads
from mgit.model.patching import prepare_patch
from mgit.model.placing import Patch, Pending, Replacement
from mgit.ops import remotes, workfiles
from mgit.ops.paths import blocking, holds_only, listed, parents, prune_dirs, under
from mgit.ops.workfiles import CheckoutResult, WorkForm, clean, finish_command, holds, shown
from mgit.progress import Bar, byte_progress
from mgit.worktree import journal
from mgit.worktree.cost import CheckoutCost, checkout_budget, estimate, over_budget
from mgit.worktree.index import Index, IndexEntry
from mgit.worktree.journal import Journal, Write
from mgit.worktree.sparse import SparsePatterns, load_patterns, make_patterns

PARENT_SEARCH_COMMITS = 64  # commits searched for the delta parents a checkout budget prices
KEEP = object()  # a checkout that leaves the sparse patterns as they are


def checkout(
    ctx: Context,
    rev: str | None = None,
    paths: Iterable[str | os.PathLike[str]] | None = None,
    *,
    create_branch: str | None = None,
    force: bool = False,
    include: Iterable[str] | None = None,
    exclude: Iterable[str] | None = None,
    full: bool = False,
    budget: str | int | Budget | None = None,
) -> CheckoutResult:
    """Switch to ``rev`` (or create a branch there), or with ``paths`` restore them from it.

    A ``rev`` that names no branch but one remote's branch (``origin/rev``) creates the local
    branch from it, as git does. A sparse checkout's safetensors files hold only the tensors
    matching some include (any, if none is given) and no exclude; the patterns stay for later
    checkouts until changed, or until ``full``.

    Args:
        rev: A branch, tag or commit (default with ``paths``: the index's content).
        paths: Files or directories to restore from ``rev``, leaving HEAD where it is.
        create_branch: Create this branch at ``rev`` (default HEAD) and switch to it.
        force: Overwrite uncommitted changes.
        include: fnmatch patterns on tensor names: a sparse checkout of these.
        exclude: fnmatch patterns on tensor names left out of the checkout.
        full: Every tensor again (drops the sparse patterns).
        budget: The most stored bytes (``"500MB"`` or bytes) to read and fetch; a costlier
            checkout is refused before anything is written.

    Returns:
        The commit checked out and the files written, patched and removed, with what was read.

    Raises:
        BadInputError: An unknown path, a branch to create that exists, or options that do
            not go together.
        RevisionError: ``rev`` names no commit.
        DirtyWorktreeError: Uncommitted changes it would overwrite (without ``force``).
        BudgetExceededError: The checkout would read and fetch more than ``budget``.
    """
    patterns = requested_patterns(include, exclude, full, paths)
    limit = checkout_budget(budget)
    if rev is None and patterns is not KEEP:
        rev = "HEAD"
    with ctx.lock:
        before = ctx.store.reads.chunks, ctx.store.reads.stored_bytes
        fetched_before = ctx.fetched.bytes
        tracked = remotes.remote_branch_for(ctx, rev) if paths is None and create_branch is None and rev else None
        if tracked is not None:
            rev, create_branch = tracked, rev
        if paths is not None:
            result = restore_paths(ctx, rev, list(paths), limit)
        else:
            result = switch(ctx, rev, create_branch, force, patterns=patterns, budget=limit)
        result.chunks_read = ctx.store.reads.chunks - before[0]
        result.bytes_read = ctx.store.reads.stored_bytes - before[1]
        result.bytes_fetched = ctx.fetched.bytes - fetched_before
        return result


def requested_patterns(
    include: Iterable[str] | None,
    exclude: Iterable[str] | None,
    full: bool,
    paths: Iterable[str | os.PathLike[str]] | None,
) -> SparsePatterns | None | object:
    """New patterns (None: back to full), or KEEP: this checkout does not change them."""
    # A single pattern given as a string is one pattern, not one per character.
    include = [include] if isinstance(include, str) else list(include or ())
    exclude = [exclude] if isinstance(exclude, str) else list(exclude or ())
    if not (include or exclude or full):
        return KEEP
    if paths is not None:
        raise BadInputError("--include/--exclude/--full choose what a whole checkout holds; not with paths")
    if full:
        if include or exclude:
            raise BadInputError("--full checks out every tensor: give it without --include/--exclude")
        return None
    return make_patterns(include, exclude)


def restore_paths(
    ctx: Context, rev: str | None, paths: list[str | os.PathLike[str]], budget: int | None = None
) -> CheckoutResult:
    index = ctx.index()
    commit = ctx.refs.resolve(rev) if rev else None
    source = ctx.snapshot(commit) if commit else index.snapshot()
    todo: dict[str, Entry] = {}
    for p in paths:
        rel = ctx.relpath(p)
        hits = {r: source[r] for r in under(source, rel)}
        if not hits:
            where = f"revision {rev!r}" if rev else "the index"
            raise BadInputError(f"path {str(p)!r} is not in {where}")
        todo.update(hits)
    result = CheckoutResult(commit)
    write_files(ctx, index, todo, result, budget=budget)
    index.save()
    return result


def switch(
    ctx: Context,
    rev: str | None,
    create_branch: str | None,
    force: bool,
    staged: Mapping[str, StagedFile] | None = None,
    patterns: SparsePatterns | None | object = KEEP,
    budget: int | None = None,
) -> CheckoutResult:
    """Bring HEAD, the index and the working tree to ``rev`` (or a new branch), journaled."""
    if rev is None and create_branch is None:
        raise BadInputError("checkout needs a revision, -b NAME, or paths after --")
    refs = ctx.refs
    target = refs.resolve(rev or "HEAD")
    if create_branch is not None:
        check_ref_name(create_branch, "branch")
        if create_branch in refs.branches():
            raise BadInputError(f"branch {create_branch!r} already exists")
        refs.refuse_clash(f"refs/heads/{create_branch}")  # before the first file is written
    index = ctx.index()
    head_snap = ctx.head_snapshot()
    target_snap = ctx.snapshot(target)
    current = load_patterns(ctx.git_dir)
    wanted = current if patterns is KEEP else patterns
    assert wanted is None or isinstance(wanted, SparsePatterns)
    forms = {p: workfiles.form(ctx, e, p, wanted) for p, e in target_snap.items()}
    if patterns is not KEEP and wanted is not None:
        _refuse_empty_selection(forms, target_snap, wanted, rev or "HEAD")
    touched = {p for p in set(head_snap) | set(target_snap) if head_snap.get(p) != target_snap.get(p)}
    reshaped = set()  # untouched files the new patterns show differently
    if wanted != current or patterns is not KEEP:  # given patterns hold, whatever sparse.json said
        untouched = {p: ie for p, ie in index.entries.items() if p in forms and p not in touched}
        reshaped = {p for p, ie in untouched.items() if shown(ie) != forms[p]}
    if not force:
        _refuse_overwrites(ctx, index, head_snap, target_snap, touched | reshaped, forms)
    todo: dict[str, Entry] = {}
    for p, entry in target_snap.items():
        ie = index.entries.get(p)
        if p in touched or p in reshaped or (force and (ie is None or not holds(ctx, p, forms[p], index))):
            todo[p] = entry
    plan = Journal(
        "checkout",
        rev or create_branch or "HEAD",
        target,
        writes={p: Write(e, forms[p].entry, forms[p].written) for p, e in todo.items()},
        removes=[p for p in sorted(set(index.entries) - set(target_snap)) if p in head_snap or force],
        old_head=refs.head(),
        patterns=wanted,
        set_patterns=wanted != current,
    )
    if create_branch:
        plan.head, plan.branch = "create", create_branch
    elif rev in refs.branches():
        plan.head, plan.branch = "branch", rev
    elif rev != "HEAD":
        plan.head = "detach"
    result = CheckoutResult(target)
    key = "checkout.inPlace" if staged is None else "merge.inPlace"  # staged files: the checkout ending a merge
    write_files(ctx, index, todo, result, staged, forms, budget, plan, in_place_key=key)
    workfiles.complete(ctx, plan, index, result)
    result.detached = refs.current_branch() is None
    return result


def _refuse_overwrites(
    ctx: Context,
    index: Index,
    head_snap: Snapshot,
    target_snap: Snapshot,
    touched: set[str],
    forms: dict[str, WorkForm],
) -> None:
    conflicts = []
    for p in sorted(touched):
        ie = index.entries.get(p)
        path = ctx.root / p
        if ie is None:
            if path.is_file() and p in target_snap and not holds(ctx, p, forms[p], index):
                conflicts.append(p)  # untracked file in the way
            continue
        if ie.entry != head_snap.get(p):
            conflicts.append(p)  # staged change
        elif path.is_file() and not clean(ctx, p, ie.worktree, index):
            conflicts.append(p)  # unstaged change (a sparse file: against what was checked out)
    if conflicts:
        shown_paths = ", ".join(conflicts[:5]) + (f" and {len(conflicts) - 5} more" if len(conflicts) > 5 else "")
        left = journal.load(ctx.git_dir)
        if left is not None:  # the finishing failed (a warning said why)
            raise DirtyWorktreeError(
                f"the interrupted {left.describe()} left {shown_paths} half switched; run "
                f"`{finish_command(left)}` to finish it"
            )
        raise DirtyWorktreeError(
            f"checkout would overwrite uncommitted changes in {shown_paths}; commit them, "
            "or use --force to discard them"
        )


def _refuse_empty_selection(forms: Mapping[str, WorkForm], snap: Snapshot, patterns: SparsePatterns, rev: str) -> None:
    """New patterns that select no tensor of a revision holding tensors are surely a typo:
    refuse them rather than empty the working tree of every model."""
    tensor_files = [p for p, e in snap.items() if e.kind == "safetensors"]
    if tensor_files and not any(forms[p].written for p in tensor_files):
        raise BadInputError(f"no tensor of {rev} matches {patterns.describe()}; nothing would be checked out")


def write_files(  # noqa: C901 (prepare then place, each with its failure path)
    ctx: Context,
    index: Index,
    todo: Mapping[str, Entry],
    result: CheckoutResult,
    staged: Mapping[str, StagedFile] | None = None,
    forms: Mapping[str, WorkForm] | None = None,
    budget: int | None = None,
    plan: Journal | None = None,
    before_first_change: Callable[[], None] | None = None,
    removes: Collection[str] = (),
    in_place_key: str = "checkout.inPlace",
    resumed: bool = False,
) -> None:
    """Write entries into the working tree, as ``forms`` show them (default: as the sparse
    patterns do); a staged file already holding an entry's bytes (a merge wrote it) is
    completed and moved into place instead. With ``budget``, the cost is checked before
    anything is written (a partial clone fetches what it lacks first). ``in_place_key``: the
    setting that lets a file be patched in place (``merge.inPlace`` for a merge's result).

    In two steps: every file's new bytes are first prepared out of sight (temporary files,
    every chunk verified: mgit.model.placing), then made visible one file after another. So a
    corrupt chunk, a full disk or Ctrl-C while preparing leaves every working file as it was
    (the temporaries are removed, and the error says so); ``before_first_change`` runs
    between the steps (a merge moves its branch there). The paths removed after the writes
    (``removes``, and ``plan``'s) that stand in a write's way go between the steps too: a
    directory of removed files where a file goes, a removed file where a directory goes (whose
    files are then prepared in the staging directory).

    The journal is saved once, before the first temporary is written: ``plan``, the
    operation's (the next command finishes it if this one is killed, removing the
    temporaries it left; the caller completes it), cleared here if preparing fails. Without
    one (restoring paths) the paths are journaled only while they are written, so that the
    next command removes what a killed run left (restoring is run again, not finished).
    ``resumed``: the journal on disk is the one being finished (recovery): it stays."""
    gone = {*removes, *(plan.removes if plan is not None else ())}
    if forms is None:
        patterns = load_patterns(ctx.git_dir)
        forms = {p: workfiles.form(ctx, e, p, patterns) for p, e in todo.items()}
    staged = staged or {}
    for p in todo:
        if (ctx.root / p).is_dir() and not holds_only(ctx.root, p, gone):
            raise BadInputError(f"cannot write {p}: a directory is in the way")
    away = {p for p in todo if not gone.isdisjoint(parents(p))}  # prepared in the staging directory
    reuse = {p: _reusable(ctx, index, p, forms[p]) for p in todo}
    if budget is not None:
        result.cost = within_budget(ctx, index, todo, forms, reuse, budget, result.commit)
    sizes = {p: entry_size(ctx.graph, forms[p].entry) for p in todo if forms[p].written}
    patch = workfiles.in_place(ctx, in_place_key)
    unchanged = "" if resumed else "; no working file was changed"  # a killed run may have changed some
    if not patch:  # opted in, a file patched needs room for its changes only: ENOSPC says it then
        _refuse_short_of_space(ctx, sizes, staged, in_place_key, unchanged)
    record = None if resumed else plan if plan is not None else _restoring(ctx, todo, forms, result.commit)
    if record is not None:
        journal.save(ctx.git_dir, record)
    ready: dict[str, Pending] = {}
    try:
        with byte_progress("checkout", sum(sizes.values())) as bar:
            for p in sorted(sizes):
                given = staged.get(p)
                ready[p] = _prepare(ctx, index, p, todo[p], forms[p], given, reuse[p], patch, bar, sizes[p], p in away)
                _crashpoints.point("prepare")
        if before_first_change is not None:
            before_first_change()
    except BaseException as exc:
        for pending in ready.values():
            pending.discard()
        if record is not None:
            journal.clear(ctx.git_dir)
        if unchanged and isinstance(exc, MgitError) and exc.args and isinstance(exc.args[0], str):
            exc.args = (f"{exc.args[0]}{unchanged}", *exc.args[1:])
        raise
    for p in blocking(todo, gone):  # the index forgets them with the operation's other removals
        workfiles.remove_file(ctx.root, p)
    try:
        _make_visible(ctx, index, todo, forms, ready, result)
    finally:
        if record is not None and plan is None:
            journal.clear(ctx.git_dir)  # restoring paths: nothing left for the next command to finish


def _restoring(
    ctx: Context, todo: Mapping[str, Entry], forms: Mapping[str, WorkForm], commit: str | None
) -> Journal | None:
    """The journal of paths restored outside a journaled operation: the next command only
    removes what a killed run left. None: nothing to write, or the journal of an operation
    whose recovery failed is there (it stays until that operation is finished)."""
    if not todo or journal.exists(ctx.git_dir):
        return None
    writes = {p: Write(e, forms[p].entry, forms[p].written) for p, e in todo.items()}
    return Journal("restore", listed(sorted(todo)), commit or "", writes, roll_forward=False)


def _refuse_short_of_space(
    ctx: Context, sizes: Mapping[str, int], staged: Mapping[str, StagedFile], key: str, unchanged: str
) -> None:
    """Refuse, before anything is written, new files that cannot all fit beside the old ones:
    every one is prepared before the first old one goes, so a switch of several shards needs
    room for all of them at once (checked per file system; a merge's staged file needs room
    for the chunks it still lacks)."""
    needed: dict[int, tuple[Path, int]] = {}  # device → (a directory on it, bytes)
    for p, size in sizes.items():
        where, nbytes = (staged[p].tmp.parent, staged[p].to_fill) if p in staged else ((ctx.root / p).parent, size)
        while not where.exists():
            where = where.parent
        device = os.stat(where).st_dev
        d, total = needed.get(device, (where, 0))
        needed[device] = (d, total + nbytes)
    for where, nbytes in needed.values():
        try:
            fs = os.statvfs(where)
        except OSError:
            continue
        free = fs.f_bavail * fs.f_frsize
        if nbytes > free:
            raise MgitError(
                f"the new files need {decimal(nbytes)} on the file system of {where} (each is written "
                f"beside its old version before any is replaced) and {decimal(free)} is free; free some "
                f"space, or let files that change little be patched in place: `mgit config {key} true`{unchanged}"
            )


def _prepare(
    ctx: Context,
    index: Index,
    rel: str,
    entry: Entry,
    form: WorkForm,
    staged: StagedFile | None,
    reuse: tuple[Path, LocalChunks] | None,
    patch: bool,
    bar: Bar,
    size: int,
    away: bool = False,
) -> Pending:
    """One file's new bytes, out of sight: a staged merge file completed, a patch (opted in),
    or the whole file beside it (``away``: a file stands where its directory goes, so in the
    staging directory)."""
    if staged is not None and staged.entry_oid == entry.oid and form.entry == entry:
        was = index.entries.get(rel)
        is_clean = functools.partial(clean, ctx, rel, was.worktree, index) if was is not None else lambda: False
        pending = staged.prepare(ctx.pool, is_clean)
        bar.advance(size)
        return pending
    found = _patch(ctx, index, rel, form, reuse, patch, bar)
    if found is not None:
        return found
    if away:
        made = prepare_entry(ctx.graph, ctx.store, ctx.pool, form.entry, ctx.git_dir / "staging" / rel, rel, None, bar)
        return Replacement(made.tmp, ctx.root / rel)
    return prepare_entry(ctx.graph, ctx.store, ctx.pool, form.entry, ctx.root / rel, rel, reuse, bar)


def _make_visible(
    ctx: Context,
    index: Index,
    todo: Mapping[str, Entry],
    forms: Mapping[str, WorkForm],
    ready: dict[str, Pending],
    result: CheckoutResult,
) -> None:
    """Put each prepared file in place (a sparse checkout's files selecting no tensor go) and
    record it in the index; what an error leaves prepared is removed (the journal finishes it;
    a file's own failed placing removes its temporary)."""
    try:
        for p in sorted(todo):
            entry, form, dest = todo[p], forms[p], ctx.root / p
            if not form.written:  # a sparse checkout selects none of its tensors
                if dest.is_file():
                    dest.unlink()
                    prune_dirs(ctx.root, p)
                index.entries[p] = IndexEntry(entry, skip_worktree=True, projection=form.projection(entry))
                result.left_out.append(p)
                continue
            pending = ready[p]
            seen = pending.apply()
            del ready[p]
            index.set(p, entry, seen, projection=form.projection(entry))
            result.written.append(p)
            if isinstance(pending, Patch) and not pending.replaced:
                result.patched.append(p)
    finally:
        for pending in ready.values():
            pending.discard()


def _patch(
    ctx: Context,
    index: Index,
    rel: str,
    form: WorkForm,
    old: tuple[Path, LocalChunks] | None,
    allowed: bool,
    bar: Bar,
) -> Patch | None:
    """The patch bringing the working file to ``form`` in place (model/patching.py), where
    allowed: only a file known to hold what the index says (a dirty one, overwritten by
    --force, is written anew)."""
    if not allowed or old is None:
        return None
    was = index.entries[rel].worktree
    is_clean = functools.partial(clean, ctx, rel, was, index)  # asked only when a patch would pay
    return prepare_patch(ctx.graph, ctx.store, ctx.pool, form.entry, ctx.root / rel, rel, was, old, bar, is_clean)


def _reusable(ctx: Context, index: Index, rel: str, form: WorkForm) -> tuple[Path, LocalChunks] | None:
    return None if form.entry.kind == "blob" else local_file(ctx, index, rel)


def local_file(ctx: Context, index: Index, rel: str) -> tuple[Path, LocalChunks] | None:
    """The working file to copy unchanged chunks from, with where its chunks lie (as the
    index says it was checked out); the copies are re-verified by hash."""
    old, dest = index.entries.get(rel), ctx.root / rel
    if old is None or old.worktree.kind == "blob" or not dest.is_file():
        return None
    return dest, local_chunks(ctx.graph, old.worktree)


def within_budget(
    ctx: Context,
    index: Index,
    todo: Mapping[str, Entry],
    forms: Mapping[str, WorkForm],
    reuse: Mapping[str, tuple[Path, LocalChunks] | None],
    budget: int,
    commit: str | None = None,
) -> CheckoutCost:
    """Refuse a checkout over ``budget`` before it writes; in a partial clone, fetch what
    it lacks first (capped). Chunks count as local only in a file known to be clean, so
    the measured reads never exceed the price."""
    reads: list[str] = []
    for p in sorted(todo):
        form = forms[p]
        if not form.written:
            continue
        found = reuse[p]
        local = found[1] if found is not None and clean(ctx, p, index.entries[p].worktree, index) else None
        reads += store_reads(ctx.graph, form.entry, p, local)
    promisor = ctx.promisor
    bases = (lambda wanted: _recorded_parents(ctx, commit, wanted)) if commit else None
    quote = promisor.quote(reads, bases) if promisor is not None else None
    cost = estimate(reads, ctx.store.read_cost, quote)
    if cost.total > budget:
        raise BudgetExceededError(over_budget(cost, budget, promisor.remote if promisor is not None else None))
    if promisor is not None and quote is not None and quote.fetch:
        # a refused checkout keeps none of what it fetched
        cost = promisor.fetch_for_checkout(reads, quote, cost, budget, ctx.store.abort)
    return cost


def _recorded_parents(ctx: Context, start: str, wanted: set[str]) -> dict[str, str]:
    """For chunks in ``wanted``, the parent chunk a commit at or before ``start`` recorded
    them against (what ``add`` stores a changed chunk as a delta of, where smaller)."""
    found: dict[str, str] = {}
    walker = ctx.graph.repo.get_walker(include=[ObjectID(start.encode())], max_entries=PARENT_SEARCH_COMMITS)
    for entry in walker:
        stats = records.read_stats(ctx.graph, ctx.graph.commit(entry.commit.id.decode()).tree)
        for triples in stats.values():
            found |= {cid: parent for cid, parent, _ in triples if cid in wanted}
        if len(found) == len(wanted):
            break
    return found
