"""A delta chunk whose bases nobody holds is decoded from its whole chain at once (XOR deltas'
planes XORed in the grouped domain, un-group once, difference deltas added in place, verify once):
the same bytes and read counts as decoding link by link, which still runs, and names the damaged
link, whenever the chain is damaged or unusual."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.errors import CorruptObjectError
from mgit.store import codec
from mgit.store.chunkstore import ChunkStore


def _versions(seed: int, count: int, size: int, edits: int) -> list[bytes]:
    """``count`` versions of a chunk, each a few bytes away from the one before."""
    rng = np.random.default_rng(seed)
    weights = (rng.standard_normal(size // 2 + 1) * 0.02).astype(np.float32)  # bf16 weights: compressible
    cur = (weights.view(np.uint32) >> 16).astype(np.uint16).view(np.uint8)[:size].copy()
    out = [cur.tobytes()]
    for _ in range(count - 1):
        cur = cur.copy()
        cur[rng.integers(0, size, edits)] = rng.integers(0, 256, edits, dtype=np.uint8)
        out.append(cur.tobytes())
    return out


def _chain(store: ChunkStore, versions: list[bytes], group: int) -> list[str]:
    """Store each version as a delta against the one before; returns their ids."""
    ids = [store.put(versions[0], group).cid]
    for prev, raw in zip(versions[:-1], versions[1:], strict=True):
        ids.append(store.put(raw, group, base=(ids[-1], prev)).cid)
    return ids


def _link_by_link(store: ChunkStore, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ChunkStore, "_chain", lambda self, *args: None)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**16),
    count=st.integers(2, 5),
    group=st.sampled_from([2, 4, 3]),
    elements=st.integers(1, 3000),
)
def test_a_chain_decodes_to_its_bytes(tmp_path_factory, seed, count, group, elements):
    store = ChunkStore(tmp_path_factory.mktemp("chain"))
    versions = _versions(seed, count, elements * group, edits=3)
    ids = _chain(store, versions, group)
    for _session_pack_then_sealed in range(2):
        for cid, raw in zip(ids, versions, strict=True):
            assert bytes(store.get(cid)) == raw
        store.seal()


def test_the_chain_is_un_grouped_and_verified_once(tmp_path, monkeypatch):
    store = ChunkStore(tmp_path)
    versions = _versions(1, 4, 1 << 16, edits=20)
    ids = _chain(store, versions, 2)
    store.seal()
    assert store.depth(ids[-1]) == 3 and store.locate(ids[0]).encoding == codec.GROUPED_ZSTD
    ungroups, verified = [], []
    ungroup, decode_verified = codec._ungroup_into, codec.decode
    monkeypatch.setattr(codec, "_ungroup_into", lambda *a: ungroups.append(1) or ungroup(*a))
    monkeypatch.setattr(codec, "decode", lambda *a, **k: verified.append(1) or decode_verified(*a, **k))
    assert bytes(store.get(ids[-1])) == versions[-1]
    assert len(ungroups) == 1 and not verified  # link by link: 4 un-groups, 4 decodes and hashes


def test_reads_are_counted_as_link_by_link(tmp_path, monkeypatch):
    store = ChunkStore(tmp_path)
    ids = _chain(store, _versions(2, 3, 1 << 14, edits=5), 2)
    store.seal()
    store.get(ids[-1])
    chained = (store.reads.stored_bytes, store.reads.raw_bytes)
    _link_by_link(store, monkeypatch)
    fresh = ChunkStore(tmp_path)
    fresh.get(ids[-1])
    assert (fresh.reads.stored_bytes, fresh.reads.raw_bytes) == chained


def test_a_damaged_base_is_named(tmp_path):
    store = ChunkStore(tmp_path)
    versions = _versions(3, 3, 1 << 14, edits=5)
    ids = _chain(store, versions, 2)
    store.seal()
    loc = store.locate(ids[0])
    assert loc is not None
    with open(loc.pack, "r+b") as f:  # flip a byte inside the keyframe's zstd payload
        f.seek(loc.offset + loc.length - 40)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x55]))
    fresh = ChunkStore(tmp_path)
    with pytest.raises(CorruptObjectError, match=ids[0][:12]):
        fresh.get(ids[-1])


def test_a_bug_in_decoding_a_chain_surfaces_instead_of_a_silent_link_by_link_read(tmp_path, monkeypatch):
    """Only damage (unreadable records, bytes that do not decode) sends a chain back to link by
    link decoding; any other exception is a bug in mgit and surfaces as itself."""
    store = ChunkStore(tmp_path)
    ids = _chain(store, _versions(4, 3, 1 << 12, edits=5), 2)
    store.seal()

    def broken(*args: object, **kwargs: object) -> bytes:
        raise TypeError("a bug")

    monkeypatch.setattr(codec, "decode_chain", broken)
    with pytest.raises(TypeError, match="a bug"):
        ChunkStore(tmp_path).get(ids[-1])


def test_a_grown_chunk_decodes_link_by_link(tmp_path):
    """A last chunk grown by appended rows is a delta against a shorter base: not one chain."""
    store = ChunkStore(tmp_path)
    base = _versions(4, 1, 4000, 0)[0]
    grown = base + bytes(range(256)) * 4
    b = store.put(base, 2).cid
    g = store.put(grown, 2, base=(b, base))
    assert g.encoding == codec.DIFF_DELTA
    store.seal()
    assert not codec.decodes_as_chain([(codec.DIFF_DELTA, 2, len(grown)), (codec.GROUPED_ZSTD, 2, len(base))])
    assert bytes(ChunkStore(tmp_path).get(g.cid)) == grown


def _mixed_chain(store: ChunkStore, versions: list[bytes], xor_links: list[bool], monkeypatch) -> list[str]:
    """A chain whose links are XOR deltas where ``xor_links`` says so (as format 2 wrote every
    delta), difference deltas elsewhere."""
    ids = [store.put(versions[0], 2).cid]
    for prev, raw, xor in zip(versions[:-1], versions[1:], xor_links, strict=True):
        with monkeypatch.context() as m:
            if xor:
                m.setattr(codec, "diffs", lambda *a: False)
            ids.append(store.put(raw, 2, base=(ids[-1], prev)).cid)
    return ids


def test_difference_deltas_above_a_format_2_chain_of_xor_deltas_decode_at_once(tmp_path, monkeypatch):
    """A repository upgraded from format 2: new versions are difference deltas on top of the XOR
    deltas it holds. XOR the old links' planes, un-group once, add the new ones: one verify."""
    store = ChunkStore(tmp_path)
    versions = _versions(5, 5, 1 << 15, edits=40)
    ids = _mixed_chain(store, versions, [True, True, False, False], monkeypatch)
    store.seal()
    encodings = [store.locate(c).encoding for c in ids]
    assert encodings == [codec.GROUPED_ZSTD, codec.XOR_DELTA, codec.XOR_DELTA, codec.DIFF_DELTA, codec.DIFF_DELTA]
    ungroups, verified = [], []
    ungroup, decode_verified = codec._ungroup_into, codec.decode
    monkeypatch.setattr(codec, "_ungroup_into", lambda *a: ungroups.append(1) or ungroup(*a))
    monkeypatch.setattr(codec, "decode", lambda *a, **k: verified.append(1) or decode_verified(*a, **k))
    for cid, raw in zip(ids, versions, strict=True):
        assert bytes(ChunkStore(tmp_path).get(cid)) == raw
    assert len(ungroups) == 5 and len(verified) == 1  # once per chunk read; only the keyframe decoded alone
    _link_by_link(store, monkeypatch)
    assert bytes(ChunkStore(tmp_path).get(ids[-1])) == versions[-1]


def test_an_xor_delta_above_a_difference_delta_decodes_link_by_link(tmp_path, monkeypatch):
    """Not what mgit writes (a chunk that can be a difference delta is one), but a valid chain:
    a sum cannot be applied in the grouped domain, so it is decoded link by link."""
    store = ChunkStore(tmp_path)
    versions = _versions(6, 3, 1 << 14, edits=10)
    ids = _mixed_chain(store, versions, [False, True], monkeypatch)
    store.seal()
    links = [(store.locate(c).encoding, 2, len(versions[0])) for c in reversed(ids)]
    assert [e for e, _, _ in links] == [codec.XOR_DELTA, codec.DIFF_DELTA, codec.GROUPED_ZSTD]
    assert not codec.decodes_as_chain(links)
    assert bytes(ChunkStore(tmp_path).get(ids[-1])) == versions[-1]
