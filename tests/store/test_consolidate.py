"""Consolidating packs (mgit/store/gc.py): only the small ones are merged, the big ones stay."""

from __future__ import annotations

import os
import random

from hypothesis import given
from hypothesis import strategies as st

from mgit.store.chunkstore import ChunkStore
from mgit.store.gc import GEOMETRIC_FACTOR, consolidate, geometric_split


def test_a_run_of_small_packs_under_a_big_one_is_merged_alone():
    assert geometric_split([10] * 32 + [120_000]) == 32
    assert geometric_split([1, 3, 9, 27]) == 2  # already geometric: still one fewer pack
    assert geometric_split([5, 5]) == 2 and geometric_split([7]) == 1 and geometric_split([]) == 0
    assert geometric_split([1, 1, 1, 100, 101]) == 5  # 101 < 2 × 103: everything


@given(st.lists(st.integers(1, 10**9), min_size=2, max_size=60).map(sorted))
def test_after_a_split_every_pack_left_is_twice_all_smaller_ones(sizes):
    count = geometric_split(sizes)
    assert 2 <= count <= len(sizes)
    stays = all(sizes[j] >= GEOMETRIC_FACTOR * sum(sizes[:j]) for j in range(len(sizes)))
    if not stays:  # a pack broke the series: from it down everything is merged, the rest is geometric
        assert all(sizes[j] >= GEOMETRIC_FACTOR * sum(sizes[:j]) for j in range(count, len(sizes)))
        assert sizes[count - 1] < GEOMETRIC_FACTOR * sum(sizes[: count - 1]) or count == 2


def test_consolidate_leaves_the_big_pack_alone_and_loses_nothing(tmp_path):
    store = ChunkStore(tmp_path / "chunks")
    rng = random.Random(5)
    chunks = {}
    big = [rng.randbytes(200_000) for _ in range(20)]  # one big pack
    for raw in big:
        chunks[store.put(raw, 1).cid] = raw
    store.seal()
    (big_pack,) = [i.pack for i in store.indexes()]
    before = os.stat(big_pack)
    for _ in range(10):  # ten small ones, as commands leave them
        raw = rng.randbytes(3_000)
        chunks[store.put(raw, 1).cid] = raw
        store.seal()
    assert len(store.indexes()) == 11
    consolidate(store)
    packs = sorted(i.pack for i in store.indexes())
    assert len(packs) == 2 and big_pack in packs
    after = os.stat(big_pack)
    assert (after.st_ino, after.st_mtime_ns, after.st_size) == (before.st_ino, before.st_mtime_ns, before.st_size)
    fresh = ChunkStore(store.root)
    assert all(fresh.get(cid) == raw for cid, raw in chunks.items())
