"""Three-way merge of two snapshots over their merge base, path by path, as git merges trees.

A path one side changed (added, modified, deleted) and the other left as in the base takes
that side's tree entry as is: the same object id, so no byte is read or written for it. A path
both sides changed differently is merged by its kind: a safetensors file tensor by tensor
(:mod:`~mgit.merge.threeway.tensors`), a text file line by line
(:mod:`~mgit.merge.threeway.text`); anything else, and a file one side deleted while the other
changed it, is a conflict, unless the :class:`~mgit.merge.threeway.conflicts.Resolution`
settles it. Nothing here touches the working tree, the index or a ref.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from mgit.graph.objects import Graph
from mgit.graph.snapshot import Entry, Snapshot
from mgit.merge.threeway.conflicts import Conflict, Resolution, Settled, conflict_kind, pick, settle
from mgit.merge.threeway.large_text import LargeFiles, is_large_text_case, read_contents, store_merged
from mgit.merge.threeway.tensors import merge_safetensors
from mgit.merge.threeway.text import is_text, merge_text
from mgit.model.manifest import TensorManifest

Sides = tuple[Entry | None, Entry, Entry]  # base (None: added on both), ours, theirs


@dataclass
class TreeMerge:
    """The merged snapshot (complete only when ``conflicts`` is empty), the conflicts left, the
    ones a resolution settled, and what the merge changes on our side: path → the tensors it
    takes from theirs (empty: the whole file, its deletion, or its lines merged)."""

    merged: Snapshot = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[Settled] = field(default_factory=list)
    changed: dict[str, list[str]] = field(default_factory=dict)


def merge_snapshots(
    graph: Graph,
    base: Snapshot,
    ours: Snapshot,
    theirs: Snapshot,
    resolution: Resolution,
    files: LargeFiles | None = None,
) -> TreeMerge:
    """``files``: where chunked (large) plain files are read and stored, to merge them by lines
    (without it, both sides changing one is a conflict)."""
    out = TreeMerge()
    parsed: dict[str, TensorManifest] = {}
    for path in sorted(set(base) | set(ours) | set(theirs)):
        b, o, t = base.get(path), ours.get(path), theirs.get(path)
        decided, entry = pick(b, o, t)
        left = len(out.conflicts)
        if not decided:
            entry = _both_changed(graph, path, b, o, t, resolution, parsed, out, files)
        if entry is not None:
            out.merged[path] = entry
        if entry != o and len(out.conflicts) == left:
            out.changed.setdefault(path, [])
    return out


def _both_changed(
    graph: Graph,
    path: str,
    b: Entry | None,
    o: Entry | None,
    t: Entry | None,
    resolution: Resolution,
    parsed: dict[str, TensorManifest],
    out: TreeMerge,
    files: LargeFiles | None = None,
) -> Entry | None:
    """The entry of a path both sides changed differently (None: deleted, or a conflict left)."""
    if o is None or t is None:  # one side deleted what the other changed
        return _settle(Conflict(path, conflict_kind(*(_key(e) for e in (b, o, t)))), o, t, resolution, out)
    if files is not None and is_large_text_case((b, o, t)):
        return _merge_large_text(graph, files, path, (b, o, t), resolution, out)
    if {o.kind, t.kind} | ({b.kind} if b is not None else set()) != {o.kind}:
        return _settle(Conflict(path, "type"), o, t, resolution, out)
    if o.kind == "safetensors":
        merged = merge_safetensors(graph, path, b, o, t, resolution, parsed)
        out.conflicts += merged.conflicts
        out.settled += merged.settled
        if merged.from_theirs and merged.entry is not None:
            out.changed[path] = merged.from_theirs
        return merged.entry
    if o.kind == "blob":
        return _merge_blob(graph, path, b, o, t, resolution, out)
    return _settle(Conflict(path, "binary" if b is not None else "add/add"), o, t, resolution, out)


def _key(entry: Entry | None) -> str | None:
    return None if entry is None else f"{entry.kind}:{entry.oid}:{entry.mode}"


def _settle(
    conflict: Conflict, o: Entry | None, t: Entry | None, resolution: Resolution, out: TreeMerge
) -> Entry | None:
    """A whole-file conflict: the side a pattern chose (recorded), else recorded as left."""
    decided, chosen = settle(conflict, resolution, _key(o), _key(t), out.settled)
    if not decided:
        out.conflicts.append(conflict)
        return None
    return o if chosen == _key(o) else t


def _merge_large_text(
    graph: Graph, files: LargeFiles, path: str, sides: Sides, resolution: Resolution, out: TreeMerge
) -> Entry | None:
    """A plain file stored as chunks on some side (mgit.merge.threeway.large_text): read whole
    up to its cap and merged as a blob is, the result stored as ``add`` stores it; past the
    cap, a binary conflict."""
    b, o, t = sides
    texts = read_contents(graph, files, sides, path)
    if texts is None:
        return _settle(Conflict(path, "binary" if b is not None else "add/add"), o, t, resolution, out)

    def store(data: bytes, mode: int) -> Entry:
        return store_merged(graph, files, path, data, mode, o)

    return _merge_blob(graph, path, b, o, t, resolution, out, texts, store)


def _merge_blob(
    graph: Graph,
    path: str,
    b: Entry | None,
    o: Entry,
    t: Entry,
    resolution: Resolution,
    out: TreeMerge,
    texts: list[bytes] | None = None,
    store: Callable[[bytes, int], Entry] | None = None,
) -> Entry | None:
    """Two changed versions of a plain file: lines merged when all three are text and the mode
    merges (a conflict where both changed the same lines, unless a pattern chose a side for
    such hunks), else a binary (or mode) conflict, settled whole. ``texts`` and ``store``: the
    versions' bytes and how the result is stored, where they are not blobs."""
    if texts is None:
        texts = [graph.blob(e.oid) if e is not None else b"" for e in (b, o, t)]
    base_text, ours_text, theirs_text = texts
    mode_ok, mode = pick(*(str(e.mode) if e is not None else None for e in (b, o, t)))
    if not all(is_text(x) for x in texts):
        return _settle(Conflict(path, "binary" if b is not None else "add/add"), o, t, resolution, out)
    if not mode_ok:
        return _settle(Conflict(path, "mode"), o, t, resolution, out)
    merged = merge_text(base_text, ours_text, theirs_text)
    if merged is None:
        conflict = Conflict(path, "text")
        side = resolution.side(conflict)
        if side is None:
            out.conflicts.append(conflict)
            return None
        out.settled.append(Settled(conflict, side))
        merged = merge_text(base_text, ours_text, theirs_text, side)
        assert merged is not None  # a side chosen for every conflicting hunk
    if store is not None:
        return store(merged, int(mode or o.mode))
    return Entry("blob", graph.put_blob(merged), int(mode or o.mode))
