"""Three-way merge of two snapshots over their merge base, path by path, as git merges trees.

A path one side changed takes that side's entry as is (nothing read); a path both changed is
merged by its kind or is a conflict, unless a resolution settles it; a criss-cross history is
merged over every base. Nothing here touches the working tree, the index or a ref. Details:
docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from mgit.graph.objects import Graph
from mgit.graph.snapshot import Entry, Snapshot
from mgit.merge.threeway.conflicts import Conflict, Resolution, Settled, Side, conflict_kind, pick_over, resolve
from mgit.merge.threeway.large_text import LargeFiles, is_large_text_case, read_contents, store_merged
from mgit.merge.threeway.tensors import merge_safetensors
from mgit.merge.threeway.text import is_text, merge_text
from mgit.model.manifest import TensorManifest

Here = tuple[tuple[Entry | None, ...], Entry | None, Entry | None]  # one path: each base's entry, ours, theirs


@dataclass(frozen=True)
class FileChange:
    """What a merge changed at one path on our side: ``how`` (``theirs``: their version, whole;
    ``deleted``; ``merged``: both sides' changes combined, by lines or by tensors) and, for a
    safetensors file merged tensor by tensor, each tensor or ``__metadata__[KEY]`` it changed →
    ``theirs``, ``method`` (computed by a merge method) or ``deleted``."""

    how: str
    tensors: dict[str, str] = field(default_factory=dict)


@dataclass
class TreeMerge:
    """The merged snapshot (complete only when ``conflicts`` is empty), the conflicts left, the
    ones a resolution settled, and what the merge changes on our side, path by path."""

    merged: Snapshot = field(default_factory=dict)
    conflicts: list[Conflict] = field(default_factory=list)
    settled: list[Settled] = field(default_factory=list)
    changed: dict[str, FileChange] = field(default_factory=dict)


def merge_snapshots(
    graph: Graph,
    bases: Sequence[Snapshot],
    ours: Snapshot,
    theirs: Snapshot,
    resolution: Resolution,
    parsed: dict[str, TensorManifest] | None = None,
    files: LargeFiles | None = None,
) -> TreeMerge:
    """``ours`` and ``theirs`` merged over their merge bases (one, or several in a criss-cross
    history); ``parsed`` (manifest blob id → manifest) may be shared with the caller; ``files``:
    where large (chunked) plain files are read and stored, to merge them by lines (without it,
    both sides changing one is a conflict)."""
    out = TreeMerge()
    parsed = {} if parsed is None else parsed
    for path in sorted(set(ours) | set(theirs) | {p for base in bases for p in base}):
        here = tuple(base.get(path) for base in bases), ours.get(path), theirs.get(path)
        decided, entry = pick_over(*here)
        tensors: dict[str, str] = {}
        left = len(out.conflicts)
        if not decided:
            entry, tensors = _both_changed(graph, path, here, resolution, parsed, out, files)
        if entry is not None:
            out.merged[path] = entry
        if entry != here[1] and len(out.conflicts) == left:
            out.changed[path] = FileChange(_how(entry, here[2]), tensors)
    _settle_file_directory(out, ours, theirs, resolution)
    return out


def _how(entry: Entry | None, theirs: Entry | None) -> str:
    return "deleted" if entry is None else "theirs" if entry == theirs else "merged"


def _both_changed(
    graph: Graph,
    path: str,
    here: Here,
    resolution: Resolution,
    parsed: dict[str, TensorManifest],
    out: TreeMerge,
    files: LargeFiles | None = None,
) -> tuple[Entry | None, dict[str, str]]:
    """The entry of a path both sides changed differently (None: deleted, or a conflict left),
    and the tensors a per-tensor merge changed on our side."""
    bases, o, t = here
    if o is None or t is None:  # one side deleted what the other changed
        return _whole_file(Conflict(path, conflict_kind(*_keys(here))), o, t, resolution, out), {}
    if files is not None and is_large_text_case((*bases, o, t)):
        return _merge_large_text(graph, files, path, here, resolution, out), {}
    if {o.kind, t.kind} | {b.kind for b in bases if b is not None} != {o.kind}:
        return _whole_file(Conflict(path, "type"), o, t, resolution, out), {}
    if o.kind == "safetensors":
        merged = merge_safetensors(graph, path, bases, o, t, resolution, parsed)
        out.conflicts += merged.conflicts
        out.settled += merged.settled
        return merged.entry, merged.taken
    if o.kind == "blob":
        return _merge_blob(graph, path, here, resolution, out), {}
    return _whole_file(Conflict(path, _file_kind(here, "binary")), o, t, resolution, out), {}


def _key(entry: Entry | None) -> str | None:
    return None if entry is None else f"{entry.kind}:{entry.oid}:{entry.mode}"


def _keys(here: Here) -> tuple[tuple[str | None, ...], str | None, str | None]:
    return tuple(_key(b) for b in here[0]), _key(here[1]), _key(here[2])


def _file_kind(here: Here, changed: str) -> str:
    """A whole file's conflict kind where both sides hold it: ``changed`` over a base holding
    it, ``add/add`` over none."""
    kind = conflict_kind(*_keys(here))
    return changed if kind == "content" else kind


def _whole_file(
    conflict: Conflict, o: Entry | None, t: Entry | None, resolution: Resolution, out: TreeMerge
) -> Entry | None:
    """A whole-file conflict: the side a pattern chose (recorded), else recorded as left."""
    decided, chosen = resolve(conflict, resolution, _key(o), _key(t), out.settled)
    if not decided:
        out.conflicts.append(conflict)
        return None
    return o if chosen == _key(o) else t


def _merge_large_text(
    graph: Graph, files: LargeFiles, path: str, here: Here, resolution: Resolution, out: TreeMerge
) -> Entry | None:
    """A plain file stored as chunks on some side (mgit.merge.threeway.large_text): read whole
    up to its cap and merged as a blob is, the result stored as ``add`` stores it; past the
    cap, a binary conflict."""
    bases, o, t = here
    assert o is not None and t is not None
    texts = read_contents(graph, files, (*bases, o, t), path)
    if texts is None:
        return _whole_file(Conflict(path, _file_kind(here, "binary")), o, t, resolution, out)

    def store(data: bytes, mode: int) -> Entry:
        return store_merged(graph, files, path, data, mode, o)

    return _merge_blob(graph, path, here, resolution, out, texts, store)


def _merge_blob(
    graph: Graph,
    path: str,
    here: Here,
    resolution: Resolution,
    out: TreeMerge,
    texts: list[bytes] | None = None,
    store: Callable[[bytes, int], Entry] | None = None,
) -> Entry | None:
    """Two changed versions of a plain file: lines merged when all are text and the mode
    merges (a conflict where both changed the same lines, unless a pattern chose a side for
    such hunks), else a binary (or mode) conflict, settled whole. ``texts`` (each base's, ours,
    theirs) and ``store``: the versions' bytes and how the result is stored, where they are not
    blobs."""
    bases, o, t = here
    assert o is not None and t is not None
    if texts is None:
        texts = [*(graph.blob(b.oid) if b is not None else b"" for b in bases), graph.blob(o.oid), graph.blob(t.oid)]
    base_texts, ours_text, theirs_text = texts[:-2], texts[-2], texts[-1]
    mode_ok, mode = pick_over(tuple(str(b.mode) if b is not None else None for b in bases), str(o.mode), str(t.mode))
    if not all(is_text(x) for x in [*base_texts, ours_text, theirs_text]):
        return _whole_file(Conflict(path, _file_kind(here, "binary")), o, t, resolution, out)
    if not mode_ok:
        return _whole_file(Conflict(path, "mode"), o, t, resolution, out)
    merged = _merge_lines(base_texts, ours_text, theirs_text)
    if merged is None:
        conflict = Conflict(path, "text" if len(set(base_texts)) == 1 else "criss-cross")
        side = resolution.side(conflict)
        if side is None:
            out.conflicts.append(conflict)
            return None
        out.settled.append(Settled(conflict, side))
        merged = _merge_lines(base_texts, ours_text, theirs_text, side)
        if merged is None:  # the bases still disagree: that side's file, whole
            merged = ours_text if side == "ours" else theirs_text
    if store is not None:
        return store(merged, int(mode or o.mode))
    return Entry("blob", graph.put_blob(merged), int(mode or o.mode))


def _merge_lines(bases: list[bytes], ours: bytes, theirs: bytes, side: Side | None = None) -> bytes | None:
    """The lines merged over each base, when every base gives the same text (else None)."""
    results = {merge_text(base, ours, theirs, side) for base in dict.fromkeys(bases)}
    return results.pop() if len(results) == 1 else None


def _settle_file_directory(out: TreeMerge, ours: Snapshot, theirs: Snapshot, resolution: Resolution) -> None:
    """A merged path that is a file while other merged paths lie under it (one side added the
    file, the other files in a directory of that name): a ``file/directory`` conflict, unless
    a pattern chose a side, whose version of everything at and under the path is then taken."""
    directories = {path[:i] for path in out.merged for i, c in enumerate(path) if c == "/"}
    done: list[str] = []
    for path in sorted(p for p in out.merged if p in directories):
        if any(path.startswith(d + "/") for d in done):
            continue  # inside a collision already settled or left
        done.append(path)
        conflict = Conflict(path, "file/directory")
        side = resolution.side(conflict)
        if side is None:
            out.conflicts.append(conflict)
            continue
        out.settled.append(Settled(conflict, side))
        chosen = ours if side == "ours" else theirs
        below = {p for p in [*out.merged, *chosen] if p == path or p.startswith(path + "/")}
        for p in below:
            _take(out, p, chosen.get(p), ours.get(p), theirs.get(p))


def _take(out: TreeMerge, path: str, entry: Entry | None, ours: Entry | None, theirs: Entry | None) -> None:
    """``entry`` (None: no file) at ``path`` in the merged snapshot, and what that changes."""
    if entry is None:
        out.merged.pop(path, None)
    else:
        out.merged[path] = entry
    if entry == ours:
        out.changed.pop(path, None)
    else:
        out.changed[path] = FileChange(_how(entry, theirs))
