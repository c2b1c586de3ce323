"""Garbage collection: drop git objects and chunks nothing reaches any more.

Roots are every ref, every reflog entry and the index, so nothing a user can still name
(or undo to) is removed. Objects and packs younger than the grace period are kept: they
may belong to a write in flight. gc runs under the repository lock, and the chunk side
is crash-safe (see mgit.store.gc), so an interrupted gc loses nothing.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from mgit.errors import MgitError
from mgit.graph.objects import Graph
from mgit.maintenance.reach import reachable
from mgit.store.chunkstore import ChunkStore
from mgit.store.gc import RepackReport, repack
from mgit.worktree.index import Index

DEFAULT_GRACE_SECONDS = 3600


@dataclass
class GcReport:
    objects_removed: int
    chunks: RepackReport


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
    return GcReport(removed, chunks)
