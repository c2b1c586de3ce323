"""fsck: verify every git object and every chunk, and that what is reachable is whole.

Each problem is reported as one line naming the object and, where known, the path and
tensor that use it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from mgit.errors import CorruptObjectError, MgitError, chunks_of
from mgit.graph.integrity import loose_damage, loose_kind, read_object
from mgit.graph.objects import Graph
from mgit.graph.snapshot import read_snapshot
from mgit.maintenance.reach import reachable
from mgit.model.chunking import chunk_ranges
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.model.manifest import ChunkRef
from mgit.parallel import ordered_map
from mgit.store.chunkstore import ChunkStore
from mgit.store.pack_health import check_packs
from mgit.worktree.index import Index

_HINT = "; run `mgit fsck`"
_HINTS = ("; run `mgit fsck --repair`", _HINT)


def _reason(exc: Exception) -> str:
    text = str(exc)
    for hint in _HINTS:
        text = text.removesuffix(hint)
    return text


def loose_objects(graph: Graph) -> dict[str, Path]:
    """Every loose git object file, by id (listed from the directory, so a file that no
    longer parses is still found)."""
    out = {}
    root = graph.git_dir / "objects"
    for sub in sorted(root.iterdir()) if root.is_dir() else []:
        if len(sub.name) == 2 and sub.is_dir():
            for f in sorted(sub.iterdir()):
                sha = sub.name + f.name
                if len(sha) == 40 and all(c in "0123456789abcdef" for c in sha):
                    out[sha] = f
    return out


def damaged_objects(graph: Graph) -> dict[str, str]:
    """Every stored git object that fails full verification → why: loose files are
    decompressed to their end and checked (header type and size, SHA-1, parse); objects in
    git packs (a ``git gc`` by hand) through the pack's own checksums and a checked read."""
    out = {sha: why for sha, path in loose_objects(graph).items() if (why := loose_damage(path, sha))}
    for pack in list(graph.objects.packs):
        try:
            pack.check()
            shas = [sha.decode() for sha in pack]
        except Exception as exc:
            out[f"git pack {Path(pack._basename).name}"] = f"{type(exc).__name__}"
            continue
        for sha in shas:
            try:
                read_object(graph.objects, sha).check()
            except Exception as exc:
                out.setdefault(sha, _reason(exc))
    return out


def _damage_line(graph: Graph, sha: str, why: str, where: Mapping[str, str]) -> str:
    """``git object ID (a tree) is damaged: WHY (needed by WHERE)``; a git pack by its name."""
    if len(sha) != 40:
        return f"{sha} is damaged: {why}"
    kind = loose_kind(graph.git_dir / "objects" / sha[:2] / sha[2:])
    name = f"git object {sha[:12]}" + (f" (a {kind})" if kind else "")
    return f"{name} is damaged: {why}" + (f" (needed by {where[sha]})" if sha in where else "")


def _is_commit(graph: Graph, sha: str) -> bool:
    try:
        return read_object(graph.objects, sha).type_name == b"commit"
    except (KeyError, CorruptObjectError):
        return False


def check_files(graph: Graph, store: ChunkStore, commits: list[str]) -> list[str]:
    """Header and manifests of every committed safetensors file agree; chunking is whole (a
    large non-tensor file's manifest is checked whole as it loads); every chunk a manifest
    lists has there the size it has in the store (every reader lays a file out from the
    manifest's sizes)."""
    problems, seen = [], set()
    indexed: ChunkStore | None = store
    try:
        store.indexes()
    except CorruptObjectError:  # a damaged pack index (check_packs names it): no sizes to compare with
        indexed = None
    for commit in commits:
        try:
            snap = read_snapshot(graph, graph.commit(commit).tree)
        except MgitError as exc:
            problems.append(f"commit {commit[:12]}: {_reason(exc)}")
            continue
        for path, entry in snap.items():
            if entry.kind == "blob" or entry.oid in seen:
                continue
            seen.add(entry.oid)
            where = f"{path} (commit {commit[:12]})"
            try:
                if entry.kind == "chunked":
                    problems += _size_problems(indexed, load_chunked(graph, entry.oid).chunks, where)
                    continue
                stored = load_safetensors(graph, entry.oid, path)
            except MgitError as exc:
                problems.append(f"{where}: {_reason(exc)}")
                continue
            for name, m in stored.manifests.items():
                sizes = [c.size for c in m.chunks]
                if sizes != [e - s for s, e in chunk_ranges(m.nbytes, m.chunk_size)]:
                    problems.append(f"tensor {name!r} in {where}: chunk sizes do not tile it")
                problems += _size_problems(indexed, m.chunks, f"tensor {name!r} in {where}")
    return problems


def _size_problems(store: ChunkStore | None, chunks: Iterable[ChunkRef], where: str) -> list[str]:
    """The first chunk listed at a size other than its raw size in the store's pack index (a
    chunk not here, or stored loose in format 1, is not compared)."""
    if store is None:
        return []
    for k, c in enumerate(chunks):
        loc = store.location(c.id)
        if loc is not None and loc.raw_size != c.size:
            return [f"{where}: chunk {k} ({c.id[:12]}) is listed as {c.size} bytes; it holds {loc.raw_size}"]
    return []


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
            with chunks_of(owners.get(cid, "")):
                store.get(cid)
        except CorruptObjectError as exc:
            return cid, _reason(exc)
        return None

    return dict(found for found in ordered_map(pool, verify, sorted(store.ids())) if found)


def check_repository(
    graph: Graph, store: ChunkStore, index: Index | None, pool: ThreadPoolExecutor, partial: bool = False
) -> list[str]:
    reach = reachable(graph, index)
    damaged = damaged_objects(graph)
    where = reach.where
    problems = [_damage_line(graph, sha, why, where) for sha, why in damaged.items()]
    shown = tuple(f"object {sha[:12]} " for sha in damaged)
    problems += [p for p in reach.missing if not p.startswith(shown)]
    problems += [
        f"object {o[:12]} is missing (needed by {where.get(o, 'a file')})"
        for o in sorted(reach.objects)
        if o not in reach.lacking and o not in damaged and not graph.has(o)
    ]
    commits = [sha for sha in reach.objects if sha not in damaged and _is_commit(graph, sha)]
    shown_ids = {*damaged, *reach.lacking, *reach.invalid}  # named already: not again by check_files
    problems += [p for p in check_files(graph, store, commits) if not any(s[:12] in p for s in shown_ids)]
    problems += check_packs(store)
    try:
        problems += check_chunks(store, reach.chunks, pool, partial)
    except CorruptObjectError as exc:  # a damaged pack index
        problems.append(_reason(exc))
    return list(dict.fromkeys(problems))  # one line per problem, in the order found
