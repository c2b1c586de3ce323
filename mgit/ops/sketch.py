"""Sketches of a commit's delta to its parent, computed, stored and found again.

A sketch is derived, labelled data: it never enters a model tree. It is a commit of its own
(no parents), named by ``refs/mgit/sketches/<sketched commit>``, whose root holds the sketch
record (``.mgit-sketch``, schema ``mgit.sketch/1``) and, at each sketched file's path, a
safetensors file of the sketch's levels: a low-rank sketch's rank blocks or a DARE sketch's
tiers (mgit.merge.sketch). So its chunks are stored, deduplicated, verified, kept by gc and
checked by fsck like any commit's, and the sketched commit's id does not change. Only a
budgeted merge reads it (mgit.ops.merge); checkout, diff and exact merges read exact chunks
only.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from mgit.context import Context
from mgit.errors import BadInputError, chunks_of
from mgit.graph import records
from mgit.graph.ids import object_id, ref_name
from mgit.graph.snapshot import Entry, Snapshot, read_snapshot, write_snapshot
from mgit.model.dtypes import DType, lookup
from mgit.model.filetree import load_safetensors
from mgit.model.manifest import TensorManifest
from mgit.model.stats import to_float32
from mgit.ops import inspect
from mgit.parallel import WORKERS, ordered_map
from mgit.progress import byte_progress

if TYPE_CHECKING:
    from mgit.merge.sketch.record import SketchRecord
    from mgit.merge.sketch.use import SketchOffer

SKETCH_REFS = "refs/mgit/sketches/"


def sketch_ref(commit: str) -> str:
    return f"{SKETCH_REFS}{commit}"


@dataclass
class SketchResult:
    """What ``sketch`` made (or found already made: ``created`` False)."""

    commit: str  # the sketched commit
    sketch: str  # the sketch commit holding the record and factors
    record: SketchRecord
    created: bool
    seconds: float

    def to_json(self) -> dict[str, Any]:
        r = self.record
        return {
            "schema": "mgit.sketch-result/1",
            "commit": self.commit,
            "sketch": self.sketch,
            "parent": r.parent,
            "kind": r.kind,
            "share": r.share,
            "created": self.created,
            "tensors_sketched": len(r.tensors),
            "tensors_exact": r.exact,
            "expert_bytes": r.expert_bytes,
            "stored_bytes": r.stored_bytes,
            "captured_share": r.captured_share,
            "seconds": self.seconds,
        }


def configured_kind(ctx: Context) -> str:
    """The kind ``mgit commit --sketch`` and ``merge --sketch-missing`` make: config
    ``sketch.kind``, else ``lowrank``."""
    from mgit.merge.sketch.record import KINDS

    kind = ctx.config_get("sketch.kind") or "lowrank"
    if kind not in KINDS:
        raise BadInputError(f"config sketch.kind is {kind!r}; set it to one of {', '.join(KINDS)}")
    return kind


def drop_orphans(ctx: Context, grace_seconds: float) -> int:
    """Delete the sketch refs whose sketched commit nothing else keeps (its branch deleted, its
    reflog entries expired): a ref is a root, so gc would otherwise keep a sketch no merge can
    use, forever. A ref younger than ``grace_seconds`` stays (its commit may be being named).
    Only commits are walked (gc's own walk reads the trees). Returns how many were deleted;
    the caller holds the lock."""
    from dulwich.objects import Commit, Tag

    from mgit.graph.integrity import scan_refs
    from mgit.maintenance.reach import roots

    named = {ref[len(SKETCH_REFS) :]: ref for ref in scan_refs(ctx.git_dir).values if ref.startswith(SKETCH_REFS)}
    if not named:
        return 0
    pending = [sha for sha, where in roots(ctx.graph, ctx.index()).items() if not where.startswith(SKETCH_REFS)]
    kept: set[str] = set()
    while pending:
        sha = pending.pop()
        if sha in kept or not ctx.graph.has(sha):
            continue
        obj = ctx.graph.read(sha)
        if isinstance(obj, Tag):  # a tag keeps what it names
            pending.append(obj.object[1].decode())
        elif isinstance(obj, Commit):
            kept.add(sha)
            pending.extend(p.decode() for p in obj.parents)
    now, dropped = time.time(), 0
    for commit, ref in sorted(named.items()):
        path = ctx.git_dir / ref
        young = path.exists() and now - path.stat().st_mtime < grace_seconds
        if commit not in kept and not young:
            del ctx.graph.repo.refs[ref_name(ref.encode())]
            dropped += 1
    return dropped


def find(ctx: Context, commit: str) -> str | None:
    """The sketch commit of ``commit`` (None: none stored)."""
    try:
        return ctx.graph.repo.refs[ref_name(sketch_ref(commit).encode())].decode()
    except KeyError:
        return None


def read_record(ctx: Context, rev: str = "HEAD") -> SketchRecord | None:
    """The sketch record of a revision's commit.

    Args:
        rev: The revision whose sketch is read (default HEAD).

    Returns:
        Its record (kind, share, parent, per-tensor ranks and residuals), or None: it has none.
    """
    found = _stored_sketch(ctx, ctx.refs.resolve(rev))
    return None if found is None else found[1]


def _stored_sketch(ctx: Context, commit: str) -> tuple[str, SketchRecord] | None:
    """(the sketch commit's tree, its record) of ``commit``'s sketch (None: it has none)."""
    from mgit.merge.sketch.record import SketchRecord

    sketch = find(ctx, commit)
    if sketch is None:
        return None
    tree = ctx.graph.commit(sketch).tree
    doc = records.read_sketch(ctx.graph, tree)
    return None if doc is None else (tree, SketchRecord.from_json(doc))


def sketch(
    ctx: Context,
    rev: str = "HEAD",
    against: str | None = None,
    share: str | float = "10%",
    kind: str = "lowrank",
    seed: int = 0,
    model: str | None = None,
    force: bool = False,
) -> SketchResult:
    """Sketch each 2-D floating tensor of ``rev``'s model that differs from ``against`` as a Δ̂
    that fits ``share`` of the tensor's stored bytes, and store it beside the commit (a budgeted
    merge may then read the sketch instead of the expert's chunks).

    Args:
        rev: The revision to sketch (default HEAD).
        against: The revision its deltas are taken from (default: its first parent).
        share: Of each tensor's stored bytes: ``"10%"`` or a fraction such as 0.1.
        kind: ``"lowrank"`` (factors of the delta) or ``"dare"`` (its values at seeded random
            positions, rescaled).
        seed: Of the random projections or positions, recorded.
        model: The model directory, when a commit holds several.
        force: Replace a sketch ``rev`` already has with different settings (else refused).

    Returns:
        What was made (or found made with the same settings: ``created`` False).

    Raises:
        BadInputError: An unknown kind, a share out of range, a revision without a parent and no
            ``against``, or an existing sketch with other settings and no ``force``.
    """
    from mgit.merge.sketch.record import KINDS, parse_share

    if kind not in KINDS:
        raise BadInputError(f"unknown sketch kind {kind!r} (known: {', '.join(KINDS)})")
    fraction = parse_share(share)
    commit = ctx.refs.resolve(rev)
    if against is None:
        parents = ctx.graph.commit(commit).parents
        if not parents:
            raise BadInputError(f"{rev} has no parent to sketch against; name one with --against")
        parent = parents[0]
    else:
        parent = ctx.refs.resolve(against)
    started = time.perf_counter()
    old = read_record(ctx, commit)
    if old is not None and not force:
        same = (old.parent, old.kind, old.share, old.seed) == (parent, kind, fraction, seed)
        if same:
            return SketchResult(commit, find(ctx, commit) or "", old, False, 0.0)
        raise BadInputError(
            f"{rev} already has a sketch (against {old.parent[:12]}, {old.kind}, {old.share * 100:g}%); "
            "pass --force to replace it"
        )
    with ctx.writing():
        record, snap = _compute(ctx, commit, parent, kind, fraction, seed, model)
        tree = write_snapshot(ctx.graph, snap, records.sketch_entries(ctx.graph, record.to_json()))
        ctx.store.seal()  # the chunks are visible before the ref names them
        who = ctx.identity()
        message = f"sketch of {commit[:12]} against {parent[:12]} ({kind}, {fraction * 100:g}%)\n"
        made = ctx.graph.put_commit(tree, [], message, who, who)
        ctx.graph.repo.refs[ref_name(sketch_ref(commit).encode())] = object_id(made.encode())
    return SketchResult(commit, made, record, True, time.perf_counter() - started)


def _compute(  # noqa: C901 (low-rank and DARE sketches side by side; moving to merge/sketch/)
    ctx: Context, commit: str, parent: str, kind: str, share: float, seed: int, model: str | None
) -> tuple[SketchRecord, Snapshot]:
    """The record and the factor files of a sketch of ``commit`` against ``parent``."""
    from threadpoolctl import threadpool_limits

    from mgit.merge.plan import model_tensors
    from mgit.merge.sketch import make
    from mgit.merge.sketch.record import SketchRecord, block_factors, factor_name, sketchable
    from mgit.model.ingest import Ingestor, TensorJob
    from mgit.model.safetensors_file import build_header

    snap, parent_snap = ctx.snapshot(commit), ctx.snapshot(parent)
    model_dir, _ = inspect.pick_model(ctx, snap, model)
    files, mine = model_tensors(ctx.graph, snap, model_dir)
    theirs = model_tensors(ctx.graph, parent_snap, model_dir)[1]
    todo, exact, expert_bytes = [], 0, 0  # expert_bytes: of the tensors sketched in the end
    for file, names in files.items():
        for name in names:
            m, p = mine[name], theirs.get(name)
            if p is None or (p.dtype, p.shape) != (m.dtype, m.shape) or _ids(p) == _ids(m):
                continue  # new, reshaped or unchanged: nothing a delta sketch can stand for
            if not sketchable(m.shape, m.dtype, m.nbytes):
                exact += 1
                continue
            held = {c.id for c in p.chunks}
            cost = sum(ctx.store.read_cost(c.id, held) for c in m.chunks if c.id not in held)
            size = make.size_for(kind, (m.shape[0], m.shape[1]), int(share * cost))
            if not size:
                exact += 1
                continue
            todo.append(_Todo(file, name, m, p, size, int(share * cost), cost))
    bf16 = lookup("BF16")  # both kinds store their values so (lowrank.FACTOR_DTYPE, dare.VALUE_DTYPE)
    assert isinstance(bf16, DType)
    out: Snapshot = {}
    sketches = []
    with byte_progress("sketch", sum(t.m.nbytes for t in todo)) as bar:
        ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool, bar)
        by_file: dict[str, list[_Todo]] = {}
        for t in todo:
            by_file.setdefault(t.file, []).append(t)
        for file, items in by_file.items():
            ingestor.begin_file(file)
            specs, jobs = [], []

            def one(t: _Todo) -> make.Made | None:
                delta = _delta(ctx, t.name, t.m, t.p)
                return make.make(kind, t.file, t.name, delta, t.size, t.budget, seed, commit)

            # one tensor per core, each single-threaded in BLAS: LAPACK's eigh and QR scale poorly
            # on two threads, and both levels at once oversubscribe the cores (measured 1.06 s
            # sequential, 1.5 s both, 0.9 s this way for a MiniLM expert at 50%)
            with threadpool_limits(limits=1, user_api="blas"), ThreadPoolExecutor(WORKERS) as workers:
                made = list(ordered_map(workers, one, items))
            for t, done in zip(items, made, strict=True):
                bar.advance(t.m.nbytes)
                if done is None:  # the delta is 0 to within rounding, or no DARE tier fits: nothing to sketch
                    exact += 1
                    continue
                expert_bytes += t.cost
                for block, level in enumerate(done.levels):
                    for factor, values in level:
                        raw = np.ascontiguousarray(values).tobytes()
                        key = factor_name(t.name, block, factor)
                        specs.append((key, bf16, tuple(values.shape)))
                        read = lambda o, n, r=raw: r[o : o + n]  # noqa: E731
                        jobs.append(TensorJob(key, bf16, tuple(values.shape), len(raw), read))
                sketches.append(done.sketch)
            if not jobs:
                continue
            ids = dict(zip([j.name for j in jobs], ingestor.tensors(jobs), strict=True))  # one window for all
            out[file] = Entry("safetensors", ingestor.safetensors_tree(build_header(specs, {}), ids))
            for n, ts in enumerate(sketches):
                if ts.file == file:
                    keys = [factor_name(ts.name, j, f) for j in range(len(ts.ends())) for f in block_factors(kind)]
                    sketches[n] = dataclasses.replace(ts, stored_bytes=sum(_stored(ctx, ids[k]) for k in keys))
    record = SketchRecord(commit, parent, kind, share, seed, make.params(kind), sketches, exact, expert_bytes)
    return record, out


@dataclass
class _Todo:
    """A tensor to sketch: its manifests here and in the parent, its size (a rank, or DARE keep
    rates), the bytes its sketch may take and its differing chunks' stored bytes."""

    file: str
    name: str
    m: TensorManifest
    p: TensorManifest
    size: int | list[float]
    budget: int
    cost: int


def _ids(m: TensorManifest) -> list[str]:
    return [c.id for c in m.chunks]


def _stored(ctx: Context, manifest_id: str) -> int:
    m = TensorManifest.from_bytes(ctx.graph.blob(manifest_id))
    return sum(ctx.store.stored_size(c.id) for c in m.chunks)


def _delta(ctx: Context, name: str, m: TensorManifest, p: TensorManifest) -> np.ndarray:
    """E − P of one tensor in float32 (m×n), the parent read first so the expert's chunks
    stored as deltas against it decode from memory."""
    from mgit.merge.tensor_inputs import read_into
    from mgit.store.chunkstore import ReadCounters

    counters = ReadCounters()
    parent_bytes = bytearray(p.nbytes)
    with chunks_of(f"tensor {name!r}"):
        read_into(ctx.store, None, p, list(range(len(p.chunks))), parent_bytes, counters)  # on a sketch worker
        mine = bytearray(parent_bytes)  # the expert: the parent's bytes, its differing chunks read over them
        same_cut = [c.size for c in m.chunks] == [c.size for c in p.chunks]
        differing = [i for i, c in enumerate(m.chunks) if not same_cut or c.id != p.chunks[i].id]
        read_into(ctx.store, None, m, differing, mine, counters, (p, parent_bytes, set(range(len(p.chunks)))))
    dtype = lookup(m.dtype)
    assert dtype is not None  # sketchable dtypes only
    delta: np.ndarray = (to_float32(mine, dtype) - to_float32(parent_bytes, dtype)).reshape(m.shape)
    return delta


def offers(
    ctx: Context,
    commit: str,
    base_tensors: dict[str, TensorManifest],
    price: Callable[[list[str]], dict[str, int]] | None = None,
) -> dict[str, SketchOffer]:
    """Tensor name → the stored sketch of ``commit``'s tensor, where its parent's tensor is the
    merge base's (``base_tensors``): only there is the sketched delta the merge's delta.
    ``price``: chunk ids → what reading each costs (default: its stored bytes here; a partial
    clone asks the remote for those it lacks, in one batch)."""
    from mgit.merge.sketch.record import block_factors, factor_name
    from mgit.merge.sketch.use import SketchOffer

    stored = _stored_sketch(ctx, commit)
    if stored is None:
        return {}
    tree, record = stored
    parent_tensors = _tensors_of(ctx, record.parent)
    files = read_snapshot(ctx.graph, tree)
    found = []
    loaded: dict[str, dict[str, TensorManifest]] = {}
    for ts in record.tensors:
        p, b = parent_tensors.get(ts.name), base_tensors.get(ts.name)
        if p is None or b is None or _ids(p) != _ids(b):
            continue
        if ts.file not in loaded:
            loaded[ts.file] = load_safetensors(ctx.graph, files[ts.file].oid, ts.file).manifests
        manifests = loaded[ts.file]
        levels = range(len(ts.ends()))
        found.append(
            (ts, tuple(tuple(manifests[factor_name(ts.name, j, f)] for f in block_factors(ts.kind)) for j in levels))
        )
    ids = [c.id for _, blocks in found for level in blocks for m in level for c in m.chunks]
    costs = price(ids) if price is not None else {cid: ctx.store.read_cost(cid) for cid in ids}
    out: dict[str, SketchOffer] = {}
    for ts, blocks in found:
        per_level = tuple(sum(costs[c.id] for m in level for c in m.chunks) for level in blocks)
        out[ts.name] = SketchOffer(ts, blocks, per_level)
    return out


def _tensors_of(ctx: Context, commit: str) -> dict[str, TensorManifest]:
    from mgit.merge.plan import model_tensors
    from mgit.ops.paths import models

    snap = ctx.snapshot(commit)
    tensors: dict[str, TensorManifest] = {}
    for model_dir in models(snap):
        tensors |= model_tensors(ctx.graph, snap, model_dir)[1]
    return tensors
