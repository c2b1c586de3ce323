"""A safetensors file both sides changed, merged tensor by tensor (docs/merging.md, "Merging
branches (three-way)").

Each tensor's manifest blob is taken as is from the side that changed it (nothing decoded); both
changing one differently is a conflict. The header is one side's verbatim where it fits, else
built as the model layer builds one. Details: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from mgit.graph.objects import Graph
from mgit.graph.snapshot import Entry
from mgit.merge.threeway.conflicts import METADATA, Conflict, Resolution, Settled, conflict_kind, pick_over, resolve
from mgit.model.dtypes import DType, lookup
from mgit.model.filetree import StoredSafetensors, load_safetensors, put_safetensors_tree
from mgit.model.manifest import TensorManifest
from mgit.model.safetensors_file import build_header

Here = tuple[tuple[str | None, ...], str | None, str | None]  # one place: each base's value, ours, theirs


@dataclass
class FileMerge:
    """One file's merge: its new entry (None: conflicts left, or no file), what was left in
    conflict, what a resolution settled, and what changed on our side: each tensor (and
    ``__metadata__[KEY]``) → ``theirs``, ``method`` (computed) or ``deleted``."""

    entry: Entry | None
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[Settled] = field(default_factory=list)
    taken: dict[str, str] = field(default_factory=dict)


def merge_safetensors(
    graph: Graph,
    path: str,
    bases: Sequence[Entry | None],
    ours: Entry,
    theirs: Entry,
    resolution: Resolution,
    parsed: dict[str, TensorManifest],
) -> FileMerge:
    """Merge the safetensors file at ``path`` tensor by tensor over each merge base's version
    (None: that base lacks the file); ``parsed`` (manifest blob id → manifest) is shared across
    files and sides."""
    b = [load_safetensors(graph, e.oid, path, parsed) if e is not None else None for e in bases]
    o = load_safetensors(graph, ours.oid, path, parsed)
    t = load_safetensors(graph, theirs.oid, path, parsed)
    out = FileMerge(None)
    chosen: dict[str, str] = {}
    for name in _names(o, t, b):
        here: Here = _ids(b, name), o.manifest_ids.get(name), t.manifest_ids.get(name)
        decided, value = pick_over(*here)
        if not decided:
            value = _conflicted(Conflict(path, _tensor_kind(name, here, [*b, o, t]), name), here, resolution, out)
        if value is not None:
            chosen[name] = value
        _record(out, name, here, value)
    metadata = _merge_metadata(path, b, o, t, resolution, out)
    if out.conflicts:
        return out
    manifests = {n: parsed.get(oid) or _parse(graph, oid, parsed) for n, oid in chosen.items()}
    header = _header(manifests, metadata, o, t)
    tree = put_safetensors_tree(graph, header, chosen)
    load_safetensors(graph, tree, path, parsed)  # the header and the manifests agree, or this raises
    out.entry = Entry("safetensors", tree)
    return out


def _names(o: StoredSafetensors, t: StoredSafetensors, bases: list[StoredSafetensors | None]) -> list[str]:
    """Every tensor any side holds: ours in data order, then theirs', then the bases'."""
    names = [x.name for side in (o, t, *bases) if side is not None for x in side.layout.tensors]
    return list(dict.fromkeys(names))


def _ids(bases: list[StoredSafetensors | None], name: str) -> tuple[str | None, ...]:
    return tuple(x.manifest_ids.get(name) if x is not None else None for x in bases)


def _tensor_kind(name: str, here: Here, sides: list[StoredSafetensors | None]) -> str:
    """A tensor conflict's kind; changes a method could combine (``content``) need one dtype and
    shape on every side."""
    kind = conflict_kind(*here)
    layouts = {(s.manifests[name].dtype, s.manifests[name].shape) for s in sides if s and name in s.manifests}
    return "dtype/shape" if kind == "content" and len(layouts) > 1 else kind


def _conflicted(conflict: Conflict, here: Here, resolution: Resolution, out: FileMerge) -> str | None:
    """A conflicting place's value: a settled conflict's, or (a conflict left, recorded in
    ``out``) None."""
    decided, value = resolve(conflict, resolution, here[1], here[2], out.settled)
    if not decided:
        out.conflicts.append(conflict)
    return value


def _record(out: FileMerge, place: str, here: Here, value: str | None) -> None:
    """What the merge changes at one place on our side, and how."""
    if value != here[1]:
        out.taken[place] = "deleted" if value is None else "theirs" if value == here[2] else "method"


def _merge_metadata(
    path: str,
    bases: list[StoredSafetensors | None],
    o: StoredSafetensors,
    t: StoredSafetensors,
    resolution: Resolution,
    out: FileMerge,
) -> dict[str, str] | None:
    """``__metadata__`` merged key by key (None: no side has any)."""
    sides = [(x.layout.metadata if x is not None else None) for x in (o, t, *bases)]
    if all(m is None for m in sides):
        return None
    om, tm, *bms = (m or {} for m in sides)
    merged = {}
    for key in dict.fromkeys([*om, *tm, *(k for bm in bms for k in bm)]):
        here = tuple(bm.get(key) for bm in bms), om.get(key), tm.get(key)
        decided, value = pick_over(*here)
        if not decided:
            kind = "criss-cross" if len(set(here[0])) > 1 else "metadata"
            value = _conflicted(Conflict(path, kind, METADATA, key), here, resolution, out)
        if value is not None:
            merged[key] = value
        _record(out, f"{METADATA}[{key}]", here, value)
    return merged


def _parse(graph: Graph, oid: str, parsed: dict[str, TensorManifest]) -> TensorManifest:
    parsed[oid] = TensorManifest.from_bytes(graph.blob(oid))
    return parsed[oid]


def _layout_of(side: StoredSafetensors) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(x.name, x.dtype.name, x.shape) for x in side.layout.tensors]


def _header(
    manifests: dict[str, TensorManifest], metadata: dict[str, str] | None, o: StoredSafetensors, t: StoredSafetensors
) -> bytes:
    """A header for the chosen tensors: a side's own bytes when they describe exactly them."""
    for side in (o, t):
        order = [n for n, _, _ in _layout_of(side)]
        if set(order) != set(manifests) or (side.layout.metadata or None) != (metadata or None):
            continue
        if _layout_of(side) == [(n, manifests[n].dtype, manifests[n].shape) for n in order]:
            return side.layout.header
    ordered = [n for n, _, _ in _layout_of(o) if n in manifests] + [n for n in manifests if n not in o.manifest_ids]
    specs: list[tuple[str, DType, tuple[int, ...]]] = []
    for name in ordered:
        m = manifests[name]
        dtype = lookup(m.dtype)
        assert dtype is not None  # a loaded manifest's dtype was checked against its header
        specs.append((name, dtype, m.shape))
    return build_header(specs, metadata)
