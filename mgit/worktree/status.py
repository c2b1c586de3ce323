"""Compare HEAD, the index and the working tree.

The stat cache means an unchanged file costs one stat(); a changed safetensors file
is re-hashed (BLAKE3 only, nothing stored) to say which tensors changed.
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from mgit.errors import BadInputError
from mgit.graph.objects import Graph, blob_id
from mgit.graph.snapshot import Entry, Snapshot
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.worktree.index import Index
from mgit.worktree.sparse import SparseSummary


@dataclass
class TensorChanges:
    added: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.added or self.removed or self.changed)


@dataclass
class FileStatus:
    path: str
    change: str  # added | modified | deleted
    tensors: TensorChanges | None = None
    note: str = ""


@dataclass
class Status:
    branch: str | None
    head: str | None
    staged: list[FileStatus] = field(default_factory=list)
    unstaged: list[FileStatus] = field(default_factory=list)
    untracked: list[str] = field(default_factory=list)  # every untracked file
    not_checked_out: list[str] = field(default_factory=list)
    sparse: SparseSummary | None = None  # a sparse checkout: its patterns and tensor counts
    untracked_collapsed: list[str] = field(default_factory=list)  # as git lists them: see collapse_untracked

    @property
    def clean(self) -> bool:
        return not (self.staged or self.unstaged or self.untracked)


def collapse_untracked(untracked: Iterable[str], tracked: Iterable[str]) -> list[str]:
    """The untracked files as `git status` lists them (``-unormal``): the files of a directory
    that holds no tracked file as that directory, ``dir/`` (the topmost such), so that an
    untracked output directory of 10,000 checkpoints is one line; others as they are."""
    holding: set[str] = set()  # the directories above a tracked file
    for path in tracked:
        d = posixpath.dirname(path)
        while d and d not in holding:
            holding.add(d)
            d = posixpath.dirname(d)
    shown: dict[str, None] = {}
    for path in untracked:
        parts = path.split("/")
        top = next((i for i in range(1, len(parts)) if "/".join(parts[:i]) not in holding), None)
        shown["/".join(parts[:top]) + "/" if top is not None else path] = None
    return list(shown)


def _tensor_changes(old: Mapping[str, object], new: Mapping[str, object]) -> TensorChanges:
    return TensorChanges(
        added=sorted(set(new) - set(old)),
        removed=sorted(set(old) - set(new)),
        changed=sorted(n for n in set(old) & set(new) if old[n] != new[n]),
    )


def compare_snapshots(graph: Graph, old: Snapshot, new: Snapshot) -> list[FileStatus]:
    """Differences between two snapshots, with per-tensor detail for safetensors files."""
    out = []
    for path in sorted(set(old) | set(new)):
        a, b = old.get(path), new.get(path)
        if a == b:
            continue
        if a is None:
            out.append(FileStatus(path, "added"))
        elif b is None:
            out.append(FileStatus(path, "deleted"))
        else:
            tensors = None
            if a.kind == b.kind == "safetensors":
                tensors = _tensor_changes(
                    load_safetensors(graph, a.oid).manifest_ids, load_safetensors(graph, b.oid).manifest_ids
                )
            out.append(FileStatus(path, "modified", tensors))
    return out


def working_matches(
    graph: Graph, pool: ThreadPoolExecutor, path: Path, rel: str, entry: Entry
) -> tuple[bool, TensorChanges | None, str]:
    """Does the working file hold exactly ``entry``? (matches, tensor changes, note)."""
    from mgit.model.ingest import classify, scan_tensor_chunks  # hashing: only for a file whose stat changed
    from mgit.model.opaque import holds

    kind = classify(rel, os.stat(path).st_size)
    if kind != entry.kind:
        return False, None, ""
    if kind == "blob":
        same = blob_id(path.read_bytes()) == entry.oid
        return same and (os.stat(path).st_mode & 0o111 != 0) == (entry.mode & 0o111 != 0), None, ""
    if kind == "chunked":  # cut where the committed file's chunks end: same bytes, same ids
        return holds(path, pool, load_chunked(graph, entry.oid, rel)), None, ""
    stored = load_safetensors(graph, entry.oid, rel)
    try:
        sizes = {n: m.chunk_size for n, m in stored.manifests.items()}
        layout, ids = scan_tensor_chunks(path, rel, pool, sizes)
    except BadInputError as exc:
        return False, None, f"not readable as safetensors: {exc}"
    old = {n: m.chunk_ids for n, m in stored.manifests.items()}
    changes = _tensor_changes(old, ids)
    return layout.header == stored.layout.header and not changes, changes, ""


def worktree_changes(
    graph: Graph, pool: ThreadPoolExecutor, root: Path, index: Index, files: dict[str, os.stat_result]
) -> tuple[list[FileStatus], list[str], list[str], bool]:
    """(unstaged changes, untracked paths, not-checked-out paths, index stat cache refreshed).
    The files the cache does not vouch for are stat'ed again after the filesystem's clock is
    read, then hashed; that stat is recorded when the content matches."""
    unstaged, skipped, suspect = [], [], []
    refreshed = False
    for rel, ie in sorted(index.entries.items()):
        st = files.get(rel)
        if st is None:
            if ie.skip_worktree:
                skipped.append(rel)
            else:
                unstaged.append(FileStatus(rel, "deleted"))
        elif not ie.matches(st):
            suspect.append((rel, ie, st))
    since = index.read_clock(st for _, _, st in suspect) if suspect else None
    for rel, ie, _ in suspect:
        st = os.stat(root / rel)  # after the reading, before the content is read
        same, tensors, note = working_matches(graph, pool, root / rel, rel, ie.worktree)
        if same:
            index.refresh(rel, ie, st, since)
            refreshed = True
        else:
            unstaged.append(FileStatus(rel, "modified", tensors, note))
    unstaged.sort(key=lambda f: f.path)
    untracked = sorted(rel for rel in files if rel not in index.entries)
    return unstaged, untracked, skipped, refreshed
