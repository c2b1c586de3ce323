"""The merge plan: what a merge will read, decided from manifests alone (no tensor data).

Per output tensor and expert, chunks whose id equals the base's chunk at the same place
cost nothing (the expert's bytes there ARE the base's); only the others are read. The
plan is recorded in the merge commit, beside what the execution actually read.
"""

from __future__ import annotations

import posixpath
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError, CorruptObjectError
from mgit.graph.objects import Graph
from mgit.graph.snapshot import Snapshot
from mgit.merge.sketch.use import SketchUse
from mgit.model.filetree import load_safetensors
from mgit.model.manifest import TensorManifest
from mgit.store.chunkstore import ChunkStore

if TYPE_CHECKING:  # only a type here: the budget package imports the plan, not the reverse
    from mgit.merge.budget.report import BudgetReport


@dataclass
class TensorPlan:
    file: str  # the base's file this tensor is written to
    name: str
    base: TensorManifest
    experts: list[TensorManifest]  # in expert order (the base's manifest for a missing tensor)
    reads: list[list[int]] = field(default_factory=list)  # per expert: chunk indexes to read
    read_bytes: list[int] = field(default_factory=list)  # per expert: stored bytes of those chunks
    costs: list[list[int]] = field(default_factory=list)  # per expert: each of those chunks' bytes
    skipped: list[list[int]] = field(default_factory=list)  # per expert: differing chunks a budget left out
    missing: list[int] = field(default_factory=list)  # experts lacking the tensor (treated as the base)
    base_costs: list[int] = field(default_factory=list)  # per base chunk: what reading it costs
    # per expert (empty: none): a budget's choice of the expert's stored sketch instead of its chunks
    sketches: list[SketchUse | None] = field(default_factory=list)
    # a `slices:` config: where the base and each expert were read (model, commit, source tensor name),
    # as the plan record's "sources" (None: every input's tensor of this name)
    sources: dict[str, Any] | None = None

    @property
    def owner(self) -> str:
        """How errors name this tensor (what a damaged chunk read for it is of)."""
        return f"tensor {self.name!r} in {self.file}"

    def sketch(self, k: int) -> SketchUse | None:
        """Expert k's sketch, when a budget chose to read it instead of exact chunks."""
        return self.sketches[k] if self.sketches else None

    def computed_from(self, k: int) -> list[int]:
        """Indexes of the chunks expert k contributes to: those read, or those its sketch stands for."""
        use = self.sketch(k)
        return list(use.chunks) if use is not None else self.reads[k]

    def restricted(self, keep: Sequence[Collection[int]], sketches: Sequence[SketchUse | None]) -> TensorPlan:
        """A copy reading, of each expert's differing chunks, only those ``keep`` names (in their
        order), and ``sketches`` (per expert; None: none) instead of the others; the rest of an
        expert read neither way are ``skipped`` (its bytes there are the base's)."""
        reads, costs, skipped = [], [], []
        for k, expert_reads in enumerate(self.reads):
            kept = set(keep[k])
            pairs = [(i, cost) for i, cost in zip(expert_reads, self.costs[k], strict=True) if i in kept]
            skipped.append([i for i in expert_reads if i not in kept and sketches[k] is None])
            reads.append([i for i, _ in pairs])
            costs.append([cost for _, cost in pairs])
        read_bytes = [sum(c) + (u.cost if u is not None else 0) for c, u in zip(costs, sketches, strict=True)]
        return replace(
            self,
            reads=reads,
            costs=costs,
            read_bytes=read_bytes,
            skipped=self.skipped + skipped,
            sketches=list(sketches) if any(u is not None for u in sketches) else [],
        )


@dataclass
class MergePlan:
    model: str
    files: dict[str, list[str]]  # base file → tensor names in data order
    tensors: list[TensorPlan]
    base_bytes: int = 0  # stored bytes of every base chunk (what reading the whole base costs)
    # How often each differing expert chunk is read: 2 for sparsifying methods (TIES, DARE, ...),
    # which decide on an expert's whole delta first, then merge chunk by chunk.
    expert_passes: int = 1
    budget: BudgetReport | None = None  # set when planned under a budget (or explained)
    fetch_sizes: dict[str, int] = field(default_factory=dict)  # partial clone: chunk → record size on the remote
    # a `slices:` config: files the merge writes besides tensors (config.json, the shard index),
    # by path, and the base's model files it leaves out (shards no output tensor goes to)
    rewritten: dict[str, bytes] = field(default_factory=dict)
    dropped: tuple[str, ...] = ()

    @property
    def expert_bytes(self) -> int:
        """Stored expert bytes read: each chunk ``expert_passes`` times, a sketch's blocks once
        (the engine keeps the reconstruction for both passes)."""
        sketched = sum(u.cost for t in self.tensors for u in t.sketches if u is not None)
        return self.expert_passes * (sum(sum(t.read_bytes) for t in self.tensors) - sketched) + sketched

    @property
    def expert_chunks(self) -> int:
        return self.expert_passes * sum(len(r) for t in self.tensors for r in t.reads)


def merged_files(start: Snapshot, plan: MergePlan, files: Snapshot) -> Snapshot:
    """The merge's files: those it starts from (``start``: the base's, or the reference's model)
    but the files the plan drops, with the ``files`` it made."""
    return {p: e for p, e in start.items() if p not in plan.dropped} | files


def model_tensors(
    graph: Graph, snap: Snapshot, model: str, parsed: dict[str, TensorManifest] | None = None
) -> tuple[dict[str, list[str]], dict[str, TensorManifest]]:
    """(file → tensor names in data order, name → manifest) for the model in directory ``model``;
    ``parsed``: manifests already parsed, by blob id (see load_safetensors)."""
    files, manifests = {}, {}
    for path, entry in sorted(snap.items()):
        if entry.kind != "safetensors" or posixpath.dirname(path) != model:
            continue
        stored = load_safetensors(graph, entry.oid, path, parsed)
        files[path] = [t.name for t in stored.layout.tensors]
        manifests.update(stored.manifests)
    return files, manifests


def prefetch_models(graph: Graph, snaps: list[Snapshot], model: str) -> None:
    """Ask for the stored safetensors trees of ``model`` in every snapshot, then for their
    manifests, ahead (:meth:`Graph.prefetch`): planning reads all of them, and at K = 16 they are
    thousands of small objects. A tree that cannot be read is left for :func:`model_tensors` to
    name, in its order."""
    trees = [e.oid for s in snaps for p, e in s.items() if e.kind == "safetensors" and posixpath.dirname(p) == model]
    graph.prefetch(trees)
    blobs: list[str] = []
    for tree in trees:
        try:
            blobs += [blob for _, _, blob in graph.tree(tree)]
        except CorruptObjectError:
            continue
    graph.prefetch(blobs)


def plan_merge(
    graph: Graph,
    store: ChunkStore,
    model: str,
    base_snap: Snapshot,
    expert_snaps: list[Snapshot],
    expert_names: list[str],
    allow_missing: bool = False,
    expert_passes: int = 1,
    cost: Callable[[str, set[str]], int] | None = None,
) -> MergePlan:
    """Per tensor and expert, the chunks differing from the base and what reading each costs:
    ``cost(chunk id, chunk ids held decoded)``, by default the stored bytes the read touches
    (a partial clone passes the bytes a fetch costs for chunks it lacks)."""
    cost = cost or store.read_cost
    prefetch_models(graph, [base_snap, *expert_snaps], model)
    parsed: dict[str, TensorManifest] = {}  # the base's and experts' manifests, by blob id
    files, base = model_tensors(graph, base_snap, model, parsed)
    if not files:
        raise BadInputError(f"the base holds no model in {model or '.'!r}")
    experts = [model_tensors(graph, snap, model, parsed)[1] for snap in expert_snaps]
    for label, tensors in zip(expert_names, experts, strict=True):
        extra = sorted(set(tensors) - set(base))
        if extra:
            raise BadInputError(f"{label} has tensors the base lacks: {', '.join(extra[:3])}")
    plan = MergePlan(model, files, [], expert_passes=expert_passes)
    for file, names in files.items():
        for name in names:
            inputs = [e.get(name) for e in experts]
            tp = plan_tensor(file, name, base[name], inputs, expert_names, allow_missing, cost)
            plan.base_bytes += sum(tp.base_costs)
            plan.tensors.append(tp)
    return plan


def plan_tensor(
    file: str,
    name: str,
    base: TensorManifest,
    experts: Sequence[TensorManifest | None],
    expert_names: list[str],
    allow_missing: bool,
    cost: Callable[[str, set[str]], int],
) -> TensorPlan:
    """One output tensor's plan: per expert (None: it lacks the tensor), the chunks differing from
    the base's and what reading each costs. A three-way merge plans its conflicting tensors alone
    with it (mgit.ops.threeway), the merge base as the base and the two sides as the experts."""
    tp = TensorPlan(file, name, base, [])
    for k, (label, m) in enumerate(zip(expert_names, experts, strict=True)):
        if m is None:
            if not allow_missing:
                raise BadInputError(f"{label} lacks tensor {name!r}; pass --allow-missing to use the base's")
            tp.missing.append(k)
            m = base
        if (m.dtype, m.shape) != (base.dtype, base.shape):
            raise BadInputError(
                f"tensor {name!r}: {label} has {m.dtype}{list(m.shape)}, the base {base.dtype}{list(base.shape)}"
            )
        same_chunking = [c.size for c in m.chunks] == [c.size for c in base.chunks]
        idx = [i for i, c in enumerate(m.chunks) if not same_chunking or c.id != base.chunks[i].id]
        tp.experts.append(m)
        tp.reads.append(idx)
        held = {c.id for c in base.chunks}  # decoded base chunks serve as delta bases
        tp.costs.append([cost(m.chunks[i].id, held) for i in idx])
        tp.read_bytes.append(sum(tp.costs[-1]))
    tp.base_costs = [cost(c.id, set()) for c in base.chunks]
    return tp
