"""Three-way merges as commits, shared by ``merge REV``, ``pull`` and ``revert``: the snapshots
merged over their base (mgit.merge.threeway), conflicts reported or settled (by side, or for
tensors by a merge method over the base: mgit.merge's plan and engine, restricted to those
tensors), uncommitted changes in the way refused, then the commit written and installed in the
working tree through the journal, as a model merge installs its result (mgit.ops.merge)."""

from __future__ import annotations

import secrets
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mgit.context import Context
from mgit.errors import MergeConflictError
from mgit.graph import records
from mgit.graph.snapshot import Snapshot, write_snapshot
from mgit.model.filetree import load_safetensors
from mgit.model.manifest import TensorManifest
from mgit.ops.merge import install_merge
from mgit.ops.workfiles import refuse_local_changes as refuse_local_changes  # branch_merge imports it here
from mgit.progress import byte_progress

if TYPE_CHECKING:  # mgit.merge is imported where used: commands that do not merge skip it
    from mgit.merge.threeway.conflicts import Conflict, Settled
    from mgit.merge.threeway.snapshots import TreeMerge

Triples = list[Any]


@dataclass
class BranchMerge:
    """What ``merge REV`` (``pull``, ``revert``) did. ``kind``: ``up-to-date`` (nothing to do),
    ``fast-forward`` (``commit`` is REV's), ``merged`` / ``reverted`` (``commit`` is the new
    one), ``conflict`` (nothing committed: ``conflicts`` lists them). ``base``: the merge base
    (a revert's: the reverted commit); ``changed``: what the merge changed on our side, path → the
    tensors taken from theirs (empty: the whole file); ``settled``: conflicts --ours, --theirs or
    --method settled."""

    kind: str
    rev: str
    theirs: str
    old_head: str | None
    branch: str | None = None
    base: str | None = None
    commit: str | None = None
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[Settled] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)
    method: str | None = None
    op: str = "merge"  # merge, pull or revert: for messages


@dataclass(frozen=True)
class Settle:
    """How the user asked conflicts to be settled: fnmatch patterns over ``PATH`` and
    ``PATH:TENSOR`` for a side, and a merge method (with its parameters) for the tensors left."""

    ours: tuple[str, ...] = ()
    theirs: tuple[str, ...] = ()
    method: str | None = None
    params: Mapping[str, Any] = field(default_factory=dict)
    seed: int | None = None

    def check(self) -> None:
        """A method and its parameters are refused before anything is read."""
        if self.method is not None:
            from mgit.merge.methods.registry import check_method

            check_method(self.method, self.params).check_params(self.params, self.method)


@dataclass(frozen=True)
class Sides:
    """The three commits of a three-way merge and their snapshots (``theirs`` None: a revert of a
    root commit, whose parent is the empty tree). ``labels`` name ours and theirs in messages."""

    base: str
    ours: str
    theirs: str | None
    snaps: tuple[Snapshot, Snapshot, Snapshot]
    labels: tuple[str, str]

    @classmethod
    def of(cls, ctx: Context, base: str, ours: str, theirs: str | None, labels: tuple[str, str]) -> Sides:
        snaps = (ctx.snapshot(base), ctx.snapshot(ours), ctx.snapshot(theirs) if theirs else {})
        return cls(base, ours, theirs, snaps, labels)


def three_way(ctx: Context, sides: Sides, settle: Settle, report: BranchMerge) -> tuple[TreeMerge, dict[str, Triples]]:
    """Merge ``sides`` (under the lock), settling conflicts as asked; the merged tree and the
    statistics of tensors a method computed. Conflicts left: MergeConflictError (``report``
    lists them), nothing written. Uncommitted changes in a path the merge writes: refused."""
    from mgit.merge.threeway.conflicts import Resolution
    from mgit.merge.threeway.large_text import LargeFiles
    from mgit.merge.threeway.snapshots import merge_snapshots

    base_snap, ours_snap, theirs_snap = sides.snaps
    patterns = Resolution(settle.ours, settle.theirs)
    files = LargeFiles(ctx.store, ctx.pool)  # chunked (large) text files merge by lines too
    tree = merge_snapshots(ctx.graph, base_snap, ours_snap, theirs_snap, patterns, files)
    by_method = [c for c in tree.conflicts if c.method_can_merge] if settle.method is not None else []
    left = [c for c in tree.conflicts if c not in by_method]
    if left:
        _raise_conflicts(report, tree.conflicts if settle.method is None else left, settle.method is not None)
    touched = {p for p in set(ours_snap) | set(tree.merged) if ours_snap.get(p) != tree.merged.get(p)}
    unchanged = _unchanged(report, "nothing was changed")
    refuse_local_changes(ctx, ctx.index(), ours_snap, touched | {c.path for c in by_method}, report.op, unchanged)
    stats: dict[str, Triples] = {}
    if by_method:
        assert settle.method is not None
        computed, stats = _by_method(ctx, by_method, sides, settle)
        tree = merge_snapshots(
            ctx.graph, base_snap, ours_snap, theirs_snap, Resolution(settle.ours, settle.theirs, computed), files
        )
        report.method = settle.method
    report.changed, report.settled = tree.changed, tree.settled
    return tree, stats


def _raise_conflicts(report: BranchMerge, conflicts: list[Conflict], method_given: bool) -> None:
    """Stop the merge: ``report`` lists the conflicts, the error says how many and where."""
    report.kind, report.conflicts = "conflict", conflicts
    tensors = sum(c.tensor is not None and c.key is None for c in conflicts)
    files = len({c.path for c in conflicts})
    what = f"{len(conflicts)} conflict(s) in {files} file(s)" + (f", {tensors} in tensors" if tensors else "")
    hint = " (--method merges only tensors both sides changed; settle the others with --ours/--theirs)"
    outcome = _unchanged(report, "nothing was committed")
    raise MergeConflictError(f"{report.op} of {report.rev}: {what}; {outcome}{hint * method_given}", report)


STASH_KEPT = "nothing changed and the stash is kept"


def _unchanged(report: BranchMerge, otherwise: str) -> str:
    """What a stopped merge says it left as it was (a stash apply: the stash too)."""
    return STASH_KEPT if report.op == "stash apply" else otherwise


def _by_method(
    ctx: Context, conflicts: Sequence[Conflict], sides: Sides, settle: Settle
) -> tuple[dict[tuple[str, str], str], dict[str, Triples]]:
    """The tensors both sides changed, merged by the method with the merge base as the base and
    [ours, theirs] as the experts (task arithmetic with weights 1, 1: base + Δours + Δtheirs):
    mgit.merge's plan and engine, on those tensors alone. (path, tensor) → the merged manifest
    blob id, and the statistics of the chunks made (relative to the base)."""
    from mgit.merge.engine import execute
    from mgit.merge.methods.registry import get_method
    from mgit.merge.plan import MergePlan, plan_tensor
    from mgit.merge.request import MergeSetup
    from mgit.model.ingest import Ingestor
    from mgit.ops.stage import parent_lookup

    assert settle.method is not None and sides.theirs is not None
    method = get_method(settle.method)
    given = dict(settle.params)
    if "weight" not in given and any(p.name == "weight" for p in method.params):
        given["weight"] = 1.0  # each side's whole change
    resolved = method.resolve(given, 2)
    method.check_params(resolved, method.name)
    seed = settle.seed if settle.seed is not None else (secrets.randbits(31) if method.random else 0)
    names: dict[str, list[str]] = defaultdict(list)
    for c in conflicts:
        names[c.path].append(str(c.tensor))
    plan, parsed = MergePlan("", {}, []), dict[str, TensorManifest]()
    labels, cost = list(sides.labels), ctx.store.read_cost
    for path, tensors in names.items():
        stored = [load_safetensors(ctx.graph, snap[path].oid, path, parsed).manifests for snap in sides.snaps]
        plan.files[path] = tensors
        for name in tensors:
            experts = [stored[1][name], stored[2][name]]
            plan.tensors.append(plan_tensor(path, name, stored[0][name], experts, labels, False, cost))
    base_snap = sides.snaps[0]
    setup = MergeSetup(method, resolved, sides.base, [sides.ours, sides.theirs], labels, base_snap, seed=seed)
    with byte_progress("merge", sum(tp.base.nbytes for tp in plan.tensors)) as bar, ctx.store.random_reads():
        ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool, bar, parent_lookup(ctx, base_snap))
        run = execute(plan, setup, ingestor, ctx.store, ctx.pool, base_snap, bar)
    computed: dict[tuple[str, str], str] = {}
    for path, entry in run.files.items():
        ids = load_safetensors(ctx.graph, entry.oid, path, parsed).manifest_ids
        computed |= {(path, name): ids[name] for name in names[path]}
    return computed, run.stats


def commit_merge(
    ctx: Context,
    sides: Sides,
    tree: TreeMerge,
    stats: dict[str, Triples],
    parents: list[str],
    message: str,
    reflog: str,
    report: BranchMerge,
) -> str:
    """Write the merged tree (with the statistics of what a method computed) and the commit, then
    move the branch and bring the working tree and index to it, journaled (``op: merge`` or
    ``revert``, head ``advance``): a killed run is finished by the next command."""
    ctx.store.seal()  # chunks a method made are visible before any tree names them
    tree_id = write_snapshot(ctx.graph, tree.merged, records.stats_entries(ctx.graph, stats))
    who = ctx.identity()
    commit = ctx.graph.put_commit(tree_id, parents, message, who, who)
    install_merge(ctx, commit, sides.snaps[1], tree.merged, sides.ours, reflog, {}, report.op, report.rev)
    report.commit = commit
    return commit


def settled_note(report: BranchMerge) -> str:
    """The lines a default commit message gets for the conflicts settled (git lists its
    conflicts there too): each place and how, a method's over which merge base."""
    if not report.settled:
        return ""
    method = f"{report.method} over {str(report.base)[:12]}"
    lines = [f"  {c.conflict.where}: {method if c.by == 'method' else c.by}" for c in report.settled]
    return "\n\nConflicts settled:\n" + "\n".join(lines)
