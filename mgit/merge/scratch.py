"""A merge computed and kept nowhere (``mgit merge --verify``): the engine runs as a merge runs,
reading the repository, but the chunks it makes are only hashed (their ids are what is compared)
and the manifests and trees it makes live in memory until the comparison is done. So verifying
writes nothing, needs no write lock and leaves no garbage for gc, even where every recomputed
chunk differs from the commit's."""

from __future__ import annotations

from dulwich.objects import Blob, Commit, ShaFile, Tag, Tree

from mgit.graph.objects import Graph
from mgit.store.chunkstore import ChunkStore, PutResult
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
        return PutResult(cid or chunk_id(raw), 0)
