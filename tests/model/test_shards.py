"""mgit.model.shards: where a committed state dict's tensors go, the shard index that lists
them, and the tied output embedding not added under a second name (issue 39)."""

from __future__ import annotations

import json

import pytest
import torch

from mgit.errors import BadInputError
from mgit.model.shards import ModelFiles, TensorSize, plan_shards, removals, shard_index, tied_aliases, ties_embeddings

SAVED = {"m/a.safetensors": ["x", "y"], "m/b.safetensors": ["z"]}


def test_only_the_files_holding_given_or_dropped_tensors_are_written():
    plan = plan_shards(SAVED, ["y"], "m/b.safetensors", set())
    assert plan.files == SAVED and plan.written == {"m/a.safetensors"} and plan.removed == []
    plan = plan_shards(SAVED, ["new"], "m/b.safetensors", {"x"})
    assert plan.files == {"m/a.safetensors": ["y"], "m/b.safetensors": ["z", "new"]}
    assert plan.written == {"m/a.safetensors", "m/b.safetensors"} and plan.removed == ["x"]
    assert plan_shards({}, ["w"], "m/model.safetensors", set()).files == {"m/model.safetensors": ["w"]}


def test_removals_are_only_what_is_asked():
    assert removals(["x", "y", "z"], {"y"}, [], False, "m") == set()
    assert removals(["x", "y", "z"], {"y"}, ["z"], False, "m") == {"z"}
    assert removals(["x", "y", "z"], {"y"}, [], True, "m") == {"x", "z"}
    with pytest.raises(BadInputError, match="cannot delete 'w': not a tensor of model 'm'"):
        removals(["x"], set(), ["w"], False, "m")
    with pytest.raises(BadInputError, match="'x' is both given and named to delete"):
        removals(["x"], {"x"}, ["x"], False, "m")


def _files(files: dict, bits: dict) -> ModelFiles:
    return ModelFiles(files, {n: TensorSize(32 * bits.get(n, 16) // 8, 32) for names in files.values() for n in names})


def test_the_shard_index_is_rewritten_only_when_what_it_lists_changes():
    before = _files(SAVED, {})
    old = json.dumps({"metadata": {"total_size": 192, "format": "pt"}, "weight_map": {}}).encode()
    assert shard_index(old, "m", before, _files(SAVED, {})) is None  # kept byte for byte
    assert shard_index(b"not json", "m", before, _files(SAVED, {"y": 32})) is None
    doc = json.loads(shard_index(old, "m", before, _files(SAVED, {"y": 32})) or b"")
    assert doc["metadata"] == {"total_size": 64 + 128 + 64, "format": "pt"}  # only the totals it has
    assert doc["weight_map"] == {"x": "a.safetensors", "y": "a.safetensors", "z": "b.safetensors"}
    old = json.dumps({"metadata": {"total_size": 0, "total_parameters": 0}}).encode()
    doc = json.loads(shard_index(old, "m", before, _files({"m/b.safetensors": ["z"]}, {})) or b"")
    assert doc == {"metadata": {"total_size": 64, "total_parameters": 32}, "weight_map": {"z": "b.safetensors"}}


def test_tied_output_embedding():
    emb = torch.randn(16, 4)
    shared = {"model.embed_tokens.weight": emb, "lm_head.weight": emb}
    equal = {"model.embed_tokens.weight": emb, "lm_head.weight": emb.clone()}
    saved = {"model.embed_tokens.weight"}
    assert tied_aliases(shared, saved, tied=False) == {"lm_head.weight"}
    assert tied_aliases(equal, saved, tied=False) == {"lm_head.weight"}
    assert tied_aliases(equal, set(), tied=False) == set()  # a first commit stores every name given...
    assert tied_aliases(equal, set(), tied=True) == {"lm_head.weight"}  # ...unless the config ties them
    assert tied_aliases(shared, {"model.embed_tokens.weight", "lm_head.weight"}, tied=True) == set()  # saved: updated
    untied = {"model.embed_tokens.weight": emb, "lm_head.weight": emb + 1}
    assert tied_aliases(untied, saved, tied=True) == set()
    norms = {"a.norm.weight": torch.ones(4), "b.norm.weight": torch.ones(4)}  # equal, not tied: both kept
    assert tied_aliases(norms, {"a.norm.weight"}, tied=True) == set()
    t5 = {"shared.weight": emb, "encoder.embed_tokens.weight": emb}  # any alias of a saved tensor
    assert tied_aliases(t5, {"shared.weight"}, tied=False) == {"encoder.embed_tokens.weight"}
    empty = {"a": torch.empty(0, 4), "b": torch.empty(0, 4)}  # no storage to share: never an alias
    assert tied_aliases(empty, {"a"}, tied=True) == set()


def test_ties_embeddings_reads_the_config():
    assert ties_embeddings(b'{"tie_word_embeddings": true}')
    assert not ties_embeddings(b'{"tie_word_embeddings": false}')
    assert not ties_embeddings(b"[1]") and not ties_embeddings(b"{") and not ties_embeddings(None)
