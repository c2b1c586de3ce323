"""fsck: verify every git object and every chunk, and that what is reachable is whole.

Each problem is reported as one line naming the object and, where known, the path and
tensor that use it.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mgit.errors import CorruptObjectError, MgitError
from mgit.graph.objects import Graph
from mgit.graph.snapshot import read_snapshot
from mgit.lock import remove_stale_git_locks
from mgit.maintenance.reach import reachable
from mgit.model.chunking import chunk_ranges
from mgit.model.filetree import load_safetensors
from mgit.parallel import ordered_map
from mgit.store.chunkstore import ChunkStore
from mgit.worktree.index import Index

_HINT = "; run `mgit fsck`"


def _reason(exc: Exception) -> str:
    return str(exc).removesuffix(_HINT)


def check_objects(graph: Graph) -> list[str]:
    problems = []
    for sha in graph.objects:
        try:
            obj = graph.objects[sha]
            obj.check()
            if obj.id != sha:
                problems.append(f"git object {sha.decode()[:12]}: content hashes to {obj.id.decode()[:12]}")
        except Exception as exc:
            problems.append(f"git object {sha.decode()[:12]}: {exc}")
    return problems


def check_files(graph: Graph, commits: list[str]) -> list[str]:
    """Header and manifests of every committed safetensors file agree; chunking is whole."""
    problems, seen = [], set()
    for commit in commits:
        try:
            snap = read_snapshot(graph, graph.commit(commit).tree)
        except MgitError as exc:
            problems.append(f"commit {commit[:12]}: {_reason(exc)}")
            continue
        for path, entry in snap.items():
            if entry.kind != "safetensors" or entry.oid in seen:
                continue
            seen.add(entry.oid)
            try:
                stored = load_safetensors(graph, entry.oid, path)
            except MgitError as exc:
                problems.append(f"{path} (commit {commit[:12]}): {_reason(exc)}")
                continue
            for name, m in stored.manifests.items():
                sizes = [c.size for c in m.chunks]
                if sizes != [e - s for s, e in chunk_ranges(m.nbytes, m.chunk_size)]:
                    problems.append(f"tensor {name!r} in {path} (commit {commit[:12]}): chunk sizes do not tile it")
    return problems


def check_chunks(
    store: ChunkStore, owners: dict[str, str], pool: ThreadPoolExecutor, partial: bool = False
) -> list[str]:
    """Missing chunks (not a problem in a partial clone: they are fetched when needed), then
    every chunk present, decoded and checked against its id."""
    problems = []
    if not partial:
        problems = [
            f"chunk {cid[:12]} of {who} is missing from the store" for cid, who in owners.items() if not store.has(cid)
        ]

    bad = bad_chunks(store, pool, owners)
    problems += [reason + ("" if cid in owners else " (an unreferenced chunk)") for cid, reason in bad.items()]
    return problems


def bad_chunks(store: ChunkStore, pool: ThreadPoolExecutor, owners: dict[str, str] | None = None) -> dict[str, str]:
    """Every chunk here that fails to decode or to match its id (with those whose delta chain
    runs through one) → why, in id order."""
    owners = owners or {}

    def verify(cid: str) -> tuple[str, str] | None:
        try:
            store.get(cid, owners.get(cid, ""))
        except CorruptObjectError as exc:
            return cid, _reason(exc)
        return None

    return dict(found for found in ordered_map(pool, verify, sorted(store.ids())) if found)


def check_repository(
    graph: Graph, store: ChunkStore, index: Index | None, pool: ThreadPoolExecutor, partial: bool = False
) -> list[str]:
    problems = check_objects(graph)
    reach = reachable(graph, index)
    problems += reach.missing
    commits = [sha for sha in reach.objects if graph.has(sha) and graph.objects[sha.encode()].type_name == b"commit"]
    problems += check_files(graph, commits)
    problems += store.check_packs()
    try:
        problems += check_chunks(store, reach.chunks, pool, partial)
    except CorruptObjectError as exc:  # a damaged pack index
        problems.append(_reason(exc))
    return list(dict.fromkeys(problems))  # one line per problem, in the order found


def stale_lock_problems(git_dir: Path, removed: list[Path]) -> list[str]:
    """Git lock files a killed mgit left under ``git_dir`` (caller holds the repository lock,
    so none is live): those taking the lock removed (``removed``) and any still there, which
    are removed now. One line each, naming the file."""
    found = list(removed) + remove_stale_git_locks(git_dir)
    return [f"stale lock file {p} (left by a killed mgit process): removed" for p in found]
