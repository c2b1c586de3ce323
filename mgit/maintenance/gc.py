"""Garbage collection: drop git objects and chunks nothing reaches any more.

Roots are every ref, every reflog entry and the index, so nothing a user can still name
(or undo to) is removed. Objects and packs younger than the grace period are kept: they
may belong to a write in flight. gc runs under the repository lock, and the chunk side
is crash-safe (see mgit.store.gc), so an interrupted gc loses nothing.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass
from pathlib import Path

from mgit.errors import MgitError
from mgit.graph.objects import Graph
from mgit.maintenance import DEFAULT_GRACE_SECONDS
from mgit.maintenance.reach import reachable
from mgit.store.chunkstore import ChunkStore
from mgit.store.gc import RepackReport, repack
from mgit.worktree.index import Index

TMP_MARK = ".tmp-"  # the temporary files fsck --repair, ref and reflog rewrites rename into place
_TMP_DIRS = ("refs", "logs")  # searched in full; objects/: its two-hex directories


@dataclass
class GcReport:
    objects_removed: int
    chunks: RepackReport
    leftovers_removed: int = 0
    sketches_removed: int = 0  # sketch refs of commits nothing else kept (mgit.ops.sketch.drop_orphans)


def leftover_files(git_dir: Path) -> list[Path]:
    """Temporary files a killed writer left in the git side of ``.mgit``: ``objects/xx/.tmp-*``
    (fsck --repair's loose objects), ``*.tmp-*`` under refs/ and logs/ and beside packed-refs.
    Never read as objects or refs, so leftovers, not damage (the chunk store has its own)."""
    found = [p for p in _files(git_dir) if TMP_MARK in p.name]
    for sub in _files(git_dir / "objects", dirs=True):
        if len(sub.name) == 2:
            found += [p for p in _files(sub) if p.name.startswith(TMP_MARK)]
    for top in _TMP_DIRS:
        for dirpath, _, names in os.walk(git_dir / top):
            found += [Path(dirpath) / n for n in names if TMP_MARK in n]
    return sorted(found)


def _files(directory: Path, dirs: bool = False) -> list[Path]:
    try:
        with os.scandir(directory) as it:
            return [Path(e.path) for e in it if (e.is_dir() if dirs else e.is_file())]
    except (FileNotFoundError, NotADirectoryError):
        return []


def remove_leftovers(git_dir: Path, now: float, grace_seconds: float) -> int:
    """Delete the leftover temporary files older than the grace period (a younger one may be
    a live write's: only the lock holder writes, but an old mgit may not take the lock)."""
    removed = 0
    for path in leftover_files(git_dir):
        try:
            if now - path.stat().st_mtime < grace_seconds:
                continue
            path.unlink()
        except FileNotFoundError:
            continue
        removed += 1
    return removed


def collect(graph: Graph, store: ChunkStore, index: Index, grace_seconds: float = DEFAULT_GRACE_SECONDS) -> GcReport:
    reach = reachable(graph, index)
    if reach.missing:
        raise MgitError(f"refusing to gc a damaged repository ({reach.missing[0]}); run `mgit fsck`")
    now = time.time()
    removed = 0
    objects = graph.objects
    for sha in list(objects._iter_loose_objects()):
        if sha.decode() in reach.objects:
            continue
        try:
            if now - objects.get_object_mtime(sha) < grace_seconds:
                continue
        except KeyError:
            continue
        objects.delete_loose_object(sha)
        removed += 1
    chunks = repack(store, set(reach.chunks), grace_seconds)
    return GcReport(removed, chunks, remove_leftovers(graph.git_dir, now, grace_seconds))
