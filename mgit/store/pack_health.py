"""Damage to sealed packs themselves (fsck, repair, gc): index checksums, magic bytes, record
headers — apart from the chunks' own verification, which reading them does."""

from __future__ import annotations

from mgit.store.chunkstore import ChunkStore
from mgit.store.pack import PackIndex, PackReader, scan_pack, write_index


def _layout_problems(index: PackIndex) -> list[str]:
    reader = PackReader(index.pack)
    try:
        return reader.check_layout(index)
    finally:
        reader.close()


def check_packs(store: ChunkStore) -> list[str]:
    """Pack-level damage: index checksums, magic bytes, record headers (fsck)."""
    problems: list[str] = []
    if not store.pack_dir.is_dir():
        return problems
    for idx_file in sorted(store.pack_dir.glob("pack-*.idx")):
        try:
            problems += _layout_problems(PackIndex(idx_file))
        except (OSError, ValueError) as exc:
            problems.append(str(exc))
    return problems


def damaged_packs(store: ChunkStore) -> list[str]:
    """Names of the sealed packs whose own bytes are damaged (magic, record headers) though
    their index reads: what a repair rewrites from the records that still verify."""
    out = []
    for idx_file in sorted(store.pack_dir.glob("pack-*.idx")) if store.pack_dir.is_dir() else []:
        try:
            index = PackIndex(idx_file)
            if _layout_problems(index):
                out.append(index.pack.name)
        except (OSError, ValueError):
            continue
    return out


def rebuild_damaged_indexes(store: ChunkStore) -> list[str]:
    """Rewrite every pack index that fails its checksum from its pack's records (repair);
    returns the packs' names. The chunks are not vouched for: verify them afterwards.
    The caller holds the repository lock (no other writer seals packs meanwhile)."""
    rebuilt = []
    for idx_file in sorted(store.pack_dir.glob("pack-*.idx")) if store.pack_dir.is_dir() else []:
        try:
            PackIndex(idx_file)
        except (OSError, ValueError):
            write_index(idx_file, scan_pack(idx_file.with_suffix(".pack")))
            rebuilt.append(idx_file.with_suffix(".pack").name)
    if rebuilt:
        store.forget_indexes()
    return rebuilt


def absent_bases(store: ChunkStore) -> dict[str, str]:
    """Delta bases the store lacks → a chunk stored as a delta of it: after a repair dropped
    a damaged base, what it must fetch again for its deltas to read."""
    out: dict[str, str] = {}
    for index in store.indexes():
        for cid, loc in index.locations().items():
            if loc.base is not None and loc.base not in out and not store.has(loc.base, refresh=False):
                out[loc.base] = cid
    return out
