"""A merge computed and kept nowhere (``mgit merge --verify``): the engine runs as a merge runs,
reading the repository, but the chunks it makes are only hashed (their ids are what is compared)
and the manifests and trees it makes live in memory until the comparison is done. So verifying
writes nothing, needs no write lock and leaves no garbage for gc, even where every recomputed
chunk differs from the commit's."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from dulwich.objects import Blob, Commit, ShaFile, Tag, Tree

from mgit.graph.objects import Graph
from mgit.store.chunkstore import ChunkStore, PutResult, ReadCounters
from mgit.store.record import RawBytes, chunk_id


class ScratchGraph(Graph):
    """The repository's graph, read as it is, with the objects written to it kept in memory."""

    def __init__(self, graph: Graph):
        super().__init__(graph.git_dir)
        self._scratch: dict[str, ShaFile] = {}

    def _add(self, obj: Blob | Tree | Commit | Tag) -> None:
        self._scratch[obj.id.decode()] = obj

    def checked(self, sha: str) -> ShaFile:
        held = self._scratch.get(sha)
        return held if held is not None else super().checked(sha)

    def has(self, sha: str) -> bool:
        return sha in self._scratch or super().has(sha)


class HashingStore(ChunkStore):
    """The repository's chunk store, read as it is, whose writes only hash: a chunk put is named
    (BLAKE3, its id) and dropped, never encoded nor written."""

    def put(
        self,
        raw: RawBytes,
        group: int,
        cid: str | None = None,
        base: tuple[str, RawBytes] | None = None,
        opaque: bool = False,
    ) -> PutResult:
        cid = cid or chunk_id(raw)
        self.made(cid, raw)
        return PutResult(cid, 0)

    def made(self, cid: str, raw: RawBytes) -> None:
        """A chunk put, once named: dropped."""


class KeepingStore(HashingStore):
    """The repository's chunk store (``inner``, read through it: a partial clone's fetches
    too), with the chunks written to it kept in memory (raw): the inputs a verification rebuilds
    before merging them (a tokenizer merge's embedding rows at the merged vocabulary's ids) are
    read back from here, and never stored."""

    def __init__(self, inner: ChunkStore):
        super().__init__(inner.root)
        self.inner = inner
        self._kept: dict[str, bytes] = {}

    def made(self, cid: str, raw: RawBytes) -> None:
        self._kept[cid] = bytes(raw)

    def keeps(self, cid: str) -> bool:
        """Whether the chunk was made here (held in memory, in no store)."""
        return cid in self._kept

    def has(self, cid: str, refresh: bool = True) -> bool:
        return self.keeps(cid) or self.inner.has(cid, refresh)

    def read_cost(self, cid: str, known: frozenset[str] | set[str] = frozenset()) -> int:
        held = self._kept.get(cid)
        return len(held) if held is not None else self.inner.read_cost(cid, known)

    def prefetch(self, cids: Iterable[str]) -> None:
        self.inner.prefetch(c for c in cids if c not in self._kept)

    def get(
        self,
        cid: str,
        *,
        known: Callable[[str], RawBytes | None] | None = None,
        counters: ReadCounters | None = None,
        out: bytearray | memoryview | None = None,
    ) -> RawBytes:
        held = self._kept.get(cid)
        if held is None:
            return self.inner.get(cid, known=known, counters=counters, out=out)
        if out is None:
            return held
        out[: len(held)] = held
        return memoryview(out)[: len(held)]
