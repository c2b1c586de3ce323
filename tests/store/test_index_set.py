"""All packs' indexes searched as one: the same answers as searching each index in turn."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.store import codec
from mgit.store.chunkstore import ChunkStore
from mgit.store.index_set import IndexSet
from mgit.store.pack import Location, PackIndex, write_index

# ids ending in NUL bytes too: numpy strips trailing NULs from S32 scalars
_ID = st.binary(min_size=31, max_size=31).flatmap(lambda b: st.sampled_from([b + b"\0", b + b"\1", b"\0" + b]))


def _indexes(tmp: Path, packs: list[list[bytes]]) -> list[PackIndex]:
    out = []
    for n, ids in enumerate(packs):
        pack = tmp / f"pack-{n:04d}.pack"
        entries = {
            cid.hex(): Location(pack, 8 + 100 * i, 100, 1000 + n, codec.GROUPED_ZSTD, 2, 0, None)
            for i, cid in enumerate(ids)
        }
        path = pack.with_suffix(".idx")
        write_index(path, entries)
        out.append(PackIndex(path))
    return out


def _first_of_each(indexes: list[PackIndex], cid: str) -> Location | None:
    for idx in indexes:
        loc = idx.find(cid)
        if loc is not None:
            return loc
    return None


@settings(max_examples=40, deadline=None)
@given(st.lists(st.lists(_ID, max_size=12, unique=True), max_size=5), st.lists(_ID, max_size=5))
def test_finds_what_searching_each_index_in_turn_finds(tmp_path_factory, packs, others):
    tmp = tmp_path_factory.mktemp("idx")
    indexes = _indexes(tmp, packs)
    combined = IndexSet(indexes)
    assert len(combined) == sum(len(p) for p in packs)
    for cid in [c for p in packs for c in p] + others:
        assert combined.find(cid.hex()) == _first_of_each(indexes, cid.hex())


def test_a_chunk_in_two_packs_is_found_in_the_first(tmp_path):
    shared = bytes(range(31)) + b"\0"
    indexes = _indexes(tmp_path, [[b"\1" * 32, shared], [shared, b"\2" * 32]])
    found = IndexSet(indexes).find(shared.hex())
    assert found is not None and found.pack.name == "pack-0000.pack"
    found = IndexSet(indexes[::-1]).find(shared.hex())
    assert found is not None and found.pack.name == "pack-0001.pack"


def test_an_empty_set_finds_nothing():
    assert IndexSet([]).find("ab" * 32) is None


def test_a_lookup_searches_no_single_index(tmp_path, monkeypatch):
    """One binary search over all packs, not one per pack."""
    indexes = _indexes(tmp_path, [[bytes([n]) * 32] for n in range(6)])
    combined = IndexSet(indexes)

    def refuse(self: PackIndex, cid: str) -> None:
        raise AssertionError("searched one index")

    monkeypatch.setattr(PackIndex, "find", refuse)
    found = combined.find((b"\5" * 32).hex())
    assert found is not None and found.pack.name == "pack-0005.pack"


def test_the_store_sees_packs_sealed_by_another_store_and_gc(tmp_path):
    first, second = ChunkStore(tmp_path), ChunkStore(tmp_path)
    a = first.put(b"a" * 1000, 1).cid
    first.seal()
    assert second.locate(a) is not None
    b = first.put(b"b" * 1000, 1).cid
    first.seal()
    assert second.locate(b, refresh=False) is None  # not looked for
    assert second.locate(b) is not None  # a miss looks for newly sealed packs
    for idx in tmp_path.glob("packs/*.idx"):
        if PackIndex(idx).find(a) is not None:
            idx.unlink()
            idx.with_suffix(".pack").unlink()
    second.forget_indexes()  # as gc does after replacing packs
    assert second.locate(a) is None and second.locate(b) is not None


@pytest.mark.parametrize("count", [1, 3])
def test_this_sessions_pack_is_found_before_and_after_sealing(tmp_path, count):
    store = ChunkStore(tmp_path)
    ids = [store.put(bytes([n]) * 5000, 1).cid for n in range(count)]
    assert all(store.locate(cid, refresh=False) is not None for cid in ids)
    store.seal()
    assert all(store.locate(cid, refresh=False) is not None for cid in ids)
