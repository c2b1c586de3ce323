"""The chunk store: content addressing, byte grouping, verification on read."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.errors import CorruptObjectError
from mgit.store import codec
from mgit.store.chunkstore import ChunkStore, chunk_id


@given(data=st.binary(max_size=5000), group=st.sampled_from([1, 2, 4, 8]))
def test_codec_round_trip(data, group):
    encoding, payload = codec.encode(data, group)
    assert codec.decode(encoding, payload, group, len(data)) == data


def test_bf16_like_weights_compress_and_random_bytes_stay_raw():
    rng = np.random.default_rng(0)
    weights = (rng.standard_normal(200_000).astype(np.float32) * 0.02).view(np.uint32) >> 16
    bf16 = weights.astype(np.uint16).tobytes()
    enc, payload = codec.encode(bf16, 2)
    assert enc == codec.GROUPED_ZSTD and len(payload) < 0.75 * len(bf16)
    noise = rng.bytes(100_000)
    enc, payload = codec.encode(noise, 1)
    assert enc == codec.RAW and payload == noise


@settings(max_examples=25, deadline=None)
@given(st.binary(min_size=1, max_size=20000))
def test_put_get_dedup(tmp_path_factory, data):
    store = ChunkStore(tmp_path_factory.mktemp("s"))
    cid, written = store.put(data, 2)
    assert cid == chunk_id(data) and written > 0
    assert store.put(data, 2) == (cid, 0)
    assert store.get(cid) == data


def test_corrupt_chunk_is_detected_with_the_tensor_named(tmp_path):
    store = ChunkStore(tmp_path)
    data = bytes(range(256)) * 100
    cid, _ = store.put(data, 1)
    path = store.path(cid)
    raw = bytearray(path.read_bytes())
    raw[-1] ^= 0xFF
    os.chmod(path, 0o644)
    path.write_bytes(bytes(raw))
    with pytest.raises(CorruptObjectError, match="tensor 'w' in m.safetensors"):
        store.get(cid, "tensor 'w' in m.safetensors")
    path.unlink()
    with pytest.raises(CorruptObjectError, match="missing"):
        store.get(cid)
