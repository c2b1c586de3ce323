"""The two sides of a diff: a committed (or staged) snapshot, or the working tree.

A committed tensor comes with its manifest (chunk ids and norms, no data read); a
working-tree tensor is hashed chunk by chunk (BLAKE3 only) with the chunk sizes its
committed counterpart recorded, so both sides cut the bytes at the same places. A large
non-tensor file is cut where its content says, as ``add`` would cut it, so that its changed
chunks are the ones an edit touched (a file committed before format 4, at fixed offsets, is
first compared at its own offsets).
"""

from __future__ import annotations

import difflib
import os
import posixpath
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import blake3

from mgit.diff.model import FileDiff, TensorDiff, TensorSide
from mgit.errors import chunks_of
from mgit.graph.objects import MODE_EXEC, MODE_FILE, Graph, blob_id
from mgit.graph.snapshot import Snapshot
from mgit.model.chunking import chunk_ranges, chunk_size_for
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.model.ingest import classify, scan_tensor_chunks
from mgit.model.manifest import FileManifest
from mgit.model.opaque import holds, scan_file
from mgit.model.safetensors_file import read_layout
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import RawBytes

TEXT_DIFF_LIMIT = 1_000_000  # bytes: larger files are summarised, not diffed line by line

# a tensor's status → the FileDiff count it adds to (others: tensors_changed)
TENSOR_COUNTERS = {"added": "tensors_added", "removed": "tensors_removed", "moved": "tensors_moved"}

Tensors = dict[tuple[str, str], TensorSide]
Known = Callable[[str], RawBytes | None]
Ranges = list[
    tuple[int, int]
]  # (start, end) of each chunk in a tensor's bytes  # a delta base's id → its raw bytes, if held


@dataclass
class Side:
    """Tensors keyed by (model directory, name), and every other file's content reader."""

    label: str
    tensors: Tensors
    files: dict[str, str]  # path → content id (git blob id, or file-tree id)
    read_file: dict[str, Callable[[], bytes]]  # path → its bytes, read when asked (non-tensor files)
    modes: dict[str, int] = field(default_factory=dict)  # path → git mode of a small file (status compares it)
    chunked: dict[str, FileManifest] = field(default_factory=dict)  # path → a large non-tensor file's chunks


def _in_model(path: str, model: str | None) -> bool:
    return model is None or posixpath.dirname(path) == model or path.startswith(model + "/") or model == ""


def _content_key(header: bytes, ids: list[tuple[str, ...]]) -> str:
    """Identity of a safetensors file comparable across sides: header bytes + chunk ids."""
    return blake3.blake3(header + "".join("".join(t) for t in ids).encode()).hexdigest()


def snapshot_side(graph: Graph, store: ChunkStore, snap: Snapshot, label: str, model: str | None) -> Side:
    tensors: Tensors = {}
    files: dict[str, str] = {}
    readers: dict[str, Callable[[], bytes]] = {}
    modes: dict[str, int] = {}
    chunked: dict[str, FileManifest] = {}
    for path, entry in sorted(snap.items()):
        if not _in_model(path, model):
            continue
        files[path] = entry.oid
        if entry.kind == "safetensors":
            stored = load_safetensors(graph, entry.oid, path)
            for name, m in stored.manifests.items():
                ids, owner = m.chunk_ids, f"tensor {name!r} in {path}"

                def read(
                    i: int, known: Known | None = None, ids: tuple[str, ...] = ids, owner: str = owner
                ) -> RawBytes:
                    with chunks_of(owner):
                        return store.get(ids[i], known=known)

                def delta_base(i: int, ids: tuple[str, ...] = ids) -> str | None:
                    loc = store.location(ids[i])
                    return loc.base if loc is not None else None

                tensors[(posixpath.dirname(path), name)] = TensorSide(
                    path,
                    m.dtype,
                    m.shape,
                    ids,
                    tuple(c.size for c in m.chunks),
                    tuple(c.l2 for c in m.chunks),
                    read,
                    delta_base,
                )
            order = [stored.manifests[t.name].chunk_ids for t in stored.layout.tensors]
            files[path] = _content_key(stored.layout.header, order)
        elif entry.kind == "blob":

            def read_blob(oid: str = entry.oid) -> bytes:
                return graph.blob(oid)

            readers[path] = read_blob
            modes[path] = entry.mode
        else:
            chunked[path] = load_chunked(graph, entry.oid, path)
            files[path] = _content_key(b"", [tuple(c.id for c in chunked[path].chunks)])
    return Side(label, tensors, files, readers, modes, chunked)


def worktree_side(
    root: Path, paths: dict[str, os.stat_result], pool: ThreadPoolExecutor, like: Side, model: str | None
) -> Side:
    """The working tree's files; tensors chunked as their counterparts in ``like`` were."""
    tensors: Tensors = {}
    files: dict[str, str] = {}
    readers: dict[str, Callable[[], bytes]] = {}
    modes: dict[str, int] = {}
    chunked: dict[str, FileManifest] = {}
    for path in sorted(paths):
        if not _in_model(path, model):
            continue
        full = root / path
        kind = classify(path, paths[path].st_size)
        if kind == "chunked":
            chunked[path] = _working_chunked(full, paths[path].st_size, pool, like.chunked.get(path))
            files[path] = _content_key(b"", [tuple(c.id for c in chunked[path].chunks)])
            continue
        if kind == "blob":
            data = full.read_bytes()
            files[path] = blob_id(data)

            def read_data(data: bytes = data) -> bytes:
                return data

            readers[path] = read_data
            modes[path] = MODE_EXEC if paths[path].st_mode & 0o111 else MODE_FILE
            continue
        model_dir = posixpath.dirname(path)
        sizes = {}
        for t in read_layout(full, path).tensors:
            other = like.tensors.get((model_dir, t.name))
            if other is not None and other.nbytes == t.nbytes and other.chunk_sizes:
                sizes[t.name] = other.chunk_sizes[0]
        layout, ids = scan_tensor_chunks(full, path, pool, sizes)
        for t in layout.tensors:
            ranges = chunk_ranges(t.nbytes, sizes.get(t.name) or chunk_size_for(t.shape, t.dtype.bits))
            start = layout.data_start + t.begin

            def read(
                i: int, known: Known | None = None, full: Path = full, start: int = start, ranges: Ranges = ranges
            ) -> bytes:
                with open(full, "rb") as f:  # a working file holds its bytes whole: ``known`` is not needed
                    return os.pread(f.fileno(), ranges[i][1] - ranges[i][0], start + ranges[i][0])

            sizes_t = tuple(e - s for s, e in ranges)
            tensors[(model_dir, t.name)] = TensorSide(
                path, t.dtype.name, t.shape, ids[t.name], sizes_t, (None,) * len(ranges), read
            )
        files[path] = _content_key(layout.header, [ids[t.name] for t in layout.tensors])
    return Side("working tree", tensors, files, readers, modes, chunked)


def _working_chunked(path: Path, size: int, pool: ThreadPoolExecutor, committed: FileManifest | None) -> FileManifest:
    """A large working file's chunks: the committed file's where it holds exactly those (a file
    committed at fixed offsets is compared at them), else as ``add`` would cut it."""
    if committed is not None and committed.chunk_size is not None and holds(path, pool, committed):
        return committed
    return FileManifest(size, scan_file(path, pool))


def chunk_changes(a: FileManifest | None, b: FileManifest | None) -> tuple[int, int]:
    """(chunks, bytes) of a large file's change: the chunks of ``b`` that ``a`` does not hold
    (content-defined chunks: an edit's new chunks, wherever they moved), or all of a removed
    file's."""
    if b is None:
        return (len(a.chunks), a.size) if a is not None else (0, 0)
    held = {c.id for c in a.chunks} if a is not None else set()
    new = [c.size for c in b.chunks if c.id not in held]
    return len(new), sum(new)


def file_diffs(a: Side, b: Side, tensors: list[TensorDiff], text: bool = True) -> list[FileDiff]:
    """One record per file that differs; safetensors files summarise their tensors."""
    per_file: dict[str, FileDiff] = {}
    for t in tensors:
        if not t.changed:
            continue
        for path in {p for p in (t.file_a, t.file_b) if p is not None}:
            fd = per_file.setdefault(path, FileDiff(path, "modified", "safetensors"))
            counter = TENSOR_COUNTERS.get(t.status, "tensors_changed")
            setattr(fd, counter, getattr(fd, counter) + 1)
            if path == (t.file_b or t.file_a):
                fd.chunks_changed += t.chunks_changed
                fd.bytes_changed += t.bytes_changed
    out = []
    for path in sorted(set(a.files) | set(b.files)):
        in_a, in_b = path in a.files, path in b.files
        same_bytes = in_a and in_b and a.files[path] == b.files[path]
        if same_bytes and a.modes.get(path) == b.modes.get(path):
            continue
        status = "added" if not in_a else "removed" if not in_b else "modified"
        if path.endswith(".safetensors"):
            fd = per_file.get(path, FileDiff(path, status, "safetensors"))
            fd.status = status
            out.append(fd)
            continue
        fd = FileDiff(path, status, "file")
        if path in a.chunked or path in b.chunked:
            fd.chunks_changed, fd.bytes_changed = chunk_changes(a.chunked.get(path), b.chunked.get(path))
        if text:
            fd.text = _mode_change(path, a.modes.get(path), b.modes.get(path)) if in_a and in_b else ""
            if not same_bytes and (_unread(a, path) or _unread(b, path)):  # a large (chunked) file
                fd.text += f"Binary files {a.label}:{path} and {b.label}:{path} differ\n"
            elif not same_bytes:
                fd.text += _text_diff(path, a.read_file.get(path), b.read_file.get(path), a.label, b.label)
        out.append(fd)
    return out


def _unread(side: Side, path: str) -> bool:
    """The side holds ``path`` as a large chunked file: its bytes are not read for a diff."""
    return path in side.files and path not in side.read_file


def _mode_change(path: str, old: int | None, new: int | None) -> str:
    """git's "old mode / new mode" lines, when the executable bit is all that differs or also."""
    if old is None or new is None or old == new:
        return ""
    return f"{path}: old mode {old:o}, new mode {new:o}\n"


def _text_diff(
    path: str, read_a: Callable[[], bytes] | None, read_b: Callable[[], bytes] | None, label_a: str, label_b: str
) -> str:
    old = read_a() if read_a else b""
    new = read_b() if read_b else b""
    if max(len(old), len(new)) > TEXT_DIFF_LIMIT:
        return f"{path}: large file changed ({len(old)} → {len(new)} bytes)\n"
    try:
        old_text, new_text = old.decode("utf-8"), new.decode("utf-8")
    except UnicodeDecodeError:
        return f"Binary files {label_a}:{path} and {label_b}:{path} differ\n"
    lines = difflib.unified_diff(
        old_text.splitlines(keepends=True),
        new_text.splitlines(keepends=True),
        fromfile=f"{label_a}:{path}",
        tofile=f"{label_b}:{path}",
    )
    return "".join(line if line.endswith("\n") else line + "\n" for line in lines)
