"""Where a merge reads and writes, as one value handed down its path (planning, budget, engine)
instead of four parameters: the object graph, the chunk store, the worker pool and what
reading a chunk costs."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from mgit.graph.objects import Graph
from mgit.store.chunkstore import ChunkStore

# (chunk id, chunk ids held decoded) → the bytes reading that chunk costs
Price = Callable[[str, set[str]], int]


@dataclass(frozen=True)
class MergeIO:
    """One repository's graph, chunk store and pool as a merge uses them, and its ``price`` of a
    chunk read: the stored bytes the read touches, or in a partial clone for chunks not here the
    bytes fetching them costs (mgit.remote.promisor)."""

    graph: Graph
    store: ChunkStore
    pool: ThreadPoolExecutor
    price: Price
