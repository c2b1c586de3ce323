"""A merge's staged file names a damaged carried chunk by the tensor at its offset and the file's
path in the repository, when the chunk is read to complete the file (the carried chunks are
written only then, far from the merge that knew the tensor)."""

from __future__ import annotations

import os

import pytest
from helpers.damage import flip_last_byte

from mgit.errors import DamagedChunkError
from mgit.model.dtypes import lookup
from mgit.model.materialize import ChunkSource, StagedFile
from mgit.model.safetensors_file import build_header
from mgit.store.chunkstore import ChunkStore


def test_a_damaged_carried_chunk_names_its_tensor_and_file(tmp_path):
    store = ChunkStore(tmp_path / "chunks")
    first, second = bytes(range(256)) * 8, bytes(reversed(range(256))) * 8
    ids = [store.put(raw, 2).cid for raw in (first, second)]
    store.seal()
    flip_last_byte(store, ids[1])
    bf16 = lookup("BF16")
    header = build_header([("a", bf16, (1024,)), ("b", bf16, (1024,))], None)
    (tmp_path / "work").mkdir()
    staged = StagedFile(
        tmp_path / "work" / "m.safetensors",
        "model/m.safetensors",
        tmp_path / "staging",
        header,
        4096,
        ChunkSource(ChunkStore(store.root), None),
    )
    staged.carry("a", 0, ids[0], len(first))
    staged.carry("b", 0, ids[1], len(second))
    with pytest.raises(DamagedChunkError) as caught:
        staged.prepare(None, lambda: False)
    want = f"chunk {ids[1][:12]} of tensor 'b' in model/m.safetensors is corrupt (fails verification); run `mgit fsck`"
    assert str(caught.value) == want
    staged.discard()
    assert os.listdir(tmp_path / "staging") == []
