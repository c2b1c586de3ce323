"""Three-way merges as commits, shared by ``merge REV``, ``pull`` and ``revert``: the snapshots
merged over their merge bases (mgit.merge.threeway), conflicts reported or settled (by side, or
for tensors by a merge method over the base: mgit.merge's plan and engine, restricted to those
tensors), uncommitted changes in the way refused, then the commit written and installed in the
working tree through the journal, as a model merge installs its result (mgit.ops.merge)."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mgit.context import Context
from mgit.errors import BadInputError, DirtyWorktreeError, MergeConflictError
from mgit.graph import records
from mgit.graph.records import Triples
from mgit.graph.snapshot import Snapshot, write_snapshot
from mgit.model.manifest import TensorManifest
from mgit.ops.merge import install_merge
from mgit.ops.merge_planning import merge_io
from mgit.ops.paths import listed
from mgit.ops.workfiles import refuse_local_changes
from mgit.progress import byte_progress
from mgit.worktree.index import Index

if TYPE_CHECKING:  # mgit.merge is imported where used: commands that do not merge skip it
    from mgit.merge.threeway.conflicts import Conflict, Resolution, Settled
    from mgit.merge.threeway.snapshots import FileChange, TreeMerge

STRATEGY = "Merge made by the 'three-way' strategy."  # git's line, in the reflog and on stdout


@dataclass
class BranchMerge:
    """What ``merge REV`` (``pull``, ``revert``) did. ``kind``: ``up-to-date`` (nothing to do),
    ``fast-forward`` (``commit`` is REV's), ``merged`` / ``reverted`` (``commit`` is the new
    one), ``conflict`` (nothing committed: ``conflicts`` lists them). ``target``: the commit REV
    names; ``theirs``: the other side merged (a merge's: ``target``; a revert's: REV's parent,
    None for a root commit's empty tree); ``bases``: the merge bases (several: a criss-cross
    history; a revert's: REV); ``changed``: what the merge changed on our side, path by path;
    ``settled``: conflicts --ours, --theirs or --method settled (``seed``: a random method's)."""

    kind: str
    rev: str
    target: str
    old_head: str | None
    branch: str | None = None
    theirs: str | None = None
    bases: list[str] = field(default_factory=list)
    commit: str | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[Settled] = field(default_factory=list)
    changed: dict[str, FileChange] = field(default_factory=dict)
    method: str | None = None
    seed: int | None = None
    op: str = "merge"  # merge, pull, revert or stash apply: for messages


@dataclass(frozen=True)
class ConflictPolicy:
    """How the user asked conflicts to be settled: fnmatch patterns for a side (the
    ``resolution``), and a merge method (with its parameters and seed) for the tensors left."""

    resolution: Resolution
    method: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None

    @classmethod
    def of(
        cls,
        ours: Iterable[str] | str = (),
        theirs: Iterable[str] | str = (),
        method: str | None = None,
        params: Mapping[str, Any] | None = None,
        seed: int | None = None,
    ) -> ConflictPolicy:
        """The policy asked for, checked before anything is read: a method and its parameters,
        and parameters without a method (a typo of an option, or a forgotten --method)."""
        from mgit.merge.threeway.conflicts import Resolution

        params = dict(params or {})
        if method is None and params:
            raise BadInputError(
                f"unknown option(s) {', '.join(sorted(params))}: merge parameters need a method "
                "(--method NAME; method=...), and nothing else takes them"
            )
        if method is not None:
            from mgit.merge.methods.registry import check_method

            check_method(method, params).check_params(params, method)
        return cls(Resolution(_patterns(ours), _patterns(theirs)), method, params, seed)


def _patterns(given: Iterable[str] | str) -> tuple[str, ...]:
    """A single pattern given as a string is one pattern, not one per character."""
    return (given,) if isinstance(given, str) else tuple(given)


@dataclass(frozen=True)
class Sides:
    """The commits of a three-way merge and their snapshots: the merge bases (several in a
    criss-cross history), ours and theirs (None: a revert of a root commit, whose parent is the
    empty tree). ``labels`` name ours and theirs in messages."""

    bases: tuple[str, ...]
    ours: str
    theirs: str | None
    base_snaps: tuple[Snapshot, ...]
    ours_snap: Snapshot
    theirs_snap: Snapshot
    labels: tuple[str, str]

    @classmethod
    def of(cls, ctx: Context, bases: Sequence[str], ours: str, theirs: str | None, labels: tuple[str, str]) -> Sides:
        base_snaps = tuple(ctx.snapshot(b) for b in bases)
        theirs_snap = ctx.snapshot(theirs) if theirs else {}
        return cls(tuple(bases), ours, theirs, base_snaps, ctx.snapshot(ours), theirs_snap, labels)


@dataclass
class Merged:
    """A three-way merge done (nothing written yet): the merged tree, the statistics of the
    tensors a method computed, the method and the seed it ran with (a random one's)."""

    tree: TreeMerge
    stats: dict[str, Triples] = field(default_factory=dict)
    method: str | None = None
    seed: int | None = None

    def report(self, made: BranchMerge, kind: str, commit: str | None) -> BranchMerge:
        """``made`` completed with what this merge did."""
        return dataclasses.replace(
            made,
            kind=kind,
            commit=commit,
            changed=self.tree.changed,
            settled=self.tree.settled,
            method=self.method,
            seed=self.seed,
        )


def three_way(ctx: Context, sides: Sides, policy: ConflictPolicy, made: BranchMerge) -> Merged:
    """Merge ``sides`` (under the lock), settling conflicts as ``policy`` says. Conflicts left:
    MergeConflictError (its report: ``made`` with them), nothing written. Uncommitted changes in
    a path the merge writes: refused."""
    from mgit.merge.threeway.large_text import LargeFiles
    from mgit.merge.threeway.snapshots import merge_snapshots

    parsed: dict[str, TensorManifest] = {}
    files = LargeFiles(ctx.store, ctx.pool)  # chunked (large) text files merge by lines too
    ours_snap, theirs_snap = sides.ours_snap, sides.theirs_snap
    tree = merge_snapshots(ctx.graph, sides.base_snaps, ours_snap, theirs_snap, policy.resolution, parsed, files)
    by_method = [c for c in tree.conflicts if c.method_can_merge] if policy.method is not None else []
    left = [c for c in tree.conflicts if c not in by_method]
    if left:
        raise conflict_error(made, left, policy.method is not None)
    touched = {p for p in set(ours_snap) | set(tree.merged) if ours_snap.get(p) != tree.merged.get(p)}
    kept = STASH_KEPT if made.op == "stash apply" else "nothing was changed"
    refuse_local_changes(ctx, ctx.index(), ours_snap, touched | {c.path for c in by_method}, made.op, kept)
    if not by_method:
        return Merged(tree)
    done = _by_method(ctx, by_method, sides, policy, parsed)
    resolution = dataclasses.replace(policy.resolution, computed=done.computed)
    tree = merge_snapshots(ctx.graph, sides.base_snaps, ours_snap, theirs_snap, resolution, parsed, files)
    return Merged(tree, done.stats, policy.method, done.seed)


def conflict_error(made: BranchMerge, conflicts: list[Conflict], method_given: bool) -> MergeConflictError:
    """The error that stops a merge: its report lists the conflicts, its line says how many
    and where."""
    report = dataclasses.replace(made, kind="conflict", conflicts=conflicts)
    tensors = sum(c.tensor is not None and c.key is None for c in conflicts)
    files = len({c.path for c in conflicts})
    what = f"{len(conflicts)} conflict(s) in {files} file(s)" + (f", {tensors} in tensors" if tensors else "")
    hint = " (--method merges only tensors both sides changed; settle the others with --ours/--theirs)"
    outcome = STASH_KEPT if made.op == "stash apply" else "nothing was committed"
    return MergeConflictError(f"{made.op} of {made.rev}: {what}; {outcome}{hint * method_given}", report)


STASH_KEPT = "nothing changed and the stash is kept"


def refuse_staged(index: Index, head_snap: Snapshot, what: str) -> None:
    """Refuse a three-way merge while the index differs from HEAD anywhere, as git does: the
    merge commit is made from HEAD and the merged tree, and would leave staged changes out."""
    staged = sorted(p for p in set(head_snap) | set(index.entries) if _staged(index, head_snap, p))
    if staged:
        raise DirtyWorktreeError(
            f"{what} needs the index to match HEAD, and {listed(staged)} has staged changes; commit or unstage "
            "them first (nothing was changed)"
        )


def _staged(index: Index, head_snap: Snapshot, path: str) -> bool:
    ie = index.entries.get(path)
    return (ie.entry if ie is not None else None) != head_snap.get(path)


@dataclass
class _MethodRun:
    computed: dict[tuple[str, str], str]  # (path, tensor) → the merged tensor's manifest blob id
    stats: dict[str, Triples]  # of the chunks made, relative to the base
    seed: int | None  # a random method's


def _by_method(
    ctx: Context, conflicts: Sequence[Conflict], sides: Sides, policy: ConflictPolicy, parsed: dict[str, TensorManifest]
) -> _MethodRun:
    """The tensors both sides changed, merged by the method with the merge base as the base and
    [ours, theirs] as the experts: mgit.merge's plan and engine, on those tensors alone. (In a
    criss-cross history every base holds such a tensor the same way: any one serves.)"""
    from mgit.merge.engine import execute
    from mgit.merge.methods.registry import get_method
    from mgit.merge.record import PlannedMerge
    from mgit.merge.request import MergeSetup
    from mgit.merge.threeway.by_method import computed_manifests, conflict_plan, side_params
    from mgit.model.ingest import Ingestor
    from mgit.ops.stage import parent_lookup

    assert policy.method is not None and sides.theirs is not None
    method = get_method(policy.method)
    params = side_params(method, policy.params)
    seed = policy.seed if policy.seed is not None else (secrets.randbits(31) if method.random else 0)
    base, base_snap, labels = sides.bases[0], sides.base_snaps[0], list(sides.labels)
    snaps = (base_snap, sides.ours_snap, sides.theirs_snap)
    io = merge_io(ctx)
    plan = conflict_plan(io.graph, conflicts, snaps, labels, io.price, parsed)
    setup = MergeSetup(method, params, base, [sides.ours, sides.theirs], labels, base_snap, seed=seed)
    with byte_progress("merge", sum(tp.base.nbytes for tp in plan.tensors)) as bar, ctx.store.random_reads():
        ingestor = Ingestor(io.graph, io.store, io.pool, bar, parent_lookup(ctx, base_snap))
        run = execute(PlannedMerge(plan, setup), io, ingestor, bar)
    computed = computed_manifests(ctx.graph, run.files, plan, parsed)
    return _MethodRun(computed, run.stats, seed if method.random else None)


def commit_merge(
    ctx: Context, sides: Sides, merged: Merged, parents: list[str], message: str, made: BranchMerge
) -> str:
    """Write the merged tree (with the statistics of what a method computed) and the commit, then
    move the branch and bring the working tree and index to it, journaled (``op``: merge, pull
    or revert; head ``advance``): a killed run is finished by the next command. The reflog
    says ``made.op``: the message's first line (a merge's: the strategy's line)."""
    ctx.store.seal()  # chunks a method made are visible before any tree names them
    tree_id = write_snapshot(ctx.graph, merged.tree.merged, records.stats_entries(ctx.graph, merged.stats))
    who = ctx.identity()
    commit = ctx.graph.put_commit(tree_id, parents, message, who, who)
    reflog = f"{made.op}: {message.splitlines()[0]}" if made.op == "revert" else f"{reflog_action(made)}: {STRATEGY}"
    install_merge(ctx, commit, sides.ours_snap, merged.tree.merged, sides.ours, reflog, op=made.op, rev=made.rev)
    return commit


def reflog_action(made: BranchMerge) -> str:
    """How the reflog names the command: ``merge REV``, ``pull``."""
    return f"merge {made.rev}" if made.op == "merge" else made.op


def settled_note(merged: Merged, base: str) -> str:
    """The lines a default commit message gets for the conflicts settled (git lists its
    conflicts there too): each place and how, a method's over which merge base (and with
    which seed, for a random one: the merge can be made again)."""
    if not merged.tree.settled:
        return ""
    method = f"{merged.method} over {base[:12]}" + (f" (seed {merged.seed})" if merged.seed is not None else "")
    lines = [f"  {c.conflict.where}: {method if c.by == 'method' else c.by}" for c in merged.tree.settled]
    return "\n\nConflicts settled:\n" + "\n".join(lines)
