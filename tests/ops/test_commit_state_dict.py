"""commit_state_dict with a state dict that is not the whole model (issue 39, defect 1): a
partial dict updates only the tensors it names, removal happens only when asked (``delete=``
by name, or ``replace=True``), a tied output embedding is not added under a second name, the
shard index stays true, and status tells the truth afterwards."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.models import (
    TINY,
    LlamaSpec,
    commit_model,
    llama_state_dict,
    sha256,
    touch_later,
    tree_hashes,
    write_model,
)

from mgit import Repository
from mgit.errors import BadInputError, MgitError

SPEC = LlamaSpec(layers=8)  # 75 tensors: embed, norm, 8 x 9, lm_head
INDEX = "model/model.safetensors.index.json"
SHARDS = [f"model/model-0000{k}-of-00004.safetensors" for k in range(1, 5)]
HEAD = "lm_head.weight"


@pytest.fixture
def sharded(repo) -> dict:
    """main: a 4-shard bf16 llama-like model of 75 tensors whose index.json carries both
    totals (recent transformers writes total_parameters too); returns its state dict."""
    sd = llama_state_dict(SPEC)
    write_model(repo.root / "model", sd, shards=4)
    index = json.loads((repo.root / INDEX).read_text())
    index["metadata"]["total_parameters"] = sum(t.numel() for t in sd.values())
    (repo.root / INDEX).write_text(json.dumps(index, indent=2))
    for f in (repo.root / "model").iterdir():
        touch_later(f)
    repo.add(["model"])
    repo.commit("base")
    return sd


def _index(repo, rev: str = "HEAD") -> dict:
    return json.loads(repo.graph.blob(repo.snapshot(rev)[INDEX].oid))


def _same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


def _totals(sd: dict) -> dict:
    return {
        "total_size": sum(t.numel() * t.element_size() for t in sd.values()),
        "total_parameters": sum(t.numel() for t in sd.values()),
    }


def _as_checked_out(repo) -> None:
    """The working tree holds byte for byte what `mgit checkout` writes for HEAD."""
    written = tree_hashes(repo.root, "model")
    for path in written:
        (repo.root / path).unlink()
    repo.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root, "model") == written


def test_the_readme_round_trip_updates_only_the_tensor_it_names(repo, sharded):
    files = tree_hashes(repo.root)
    entries = repo.snapshot()
    sd = repo.state_dict("main", names=[HEAD])  # the README's example
    sd[HEAD] = sd[HEAD] * 2
    repo.commit_state_dict(sd, model="model", message="step 1000")
    expected = dict(sharded, **sd)
    assert _same(repo.state_dict(), expected)  # 75 tensors, not 1
    after = repo.snapshot()
    holder = "model/" + _index(repo)["weight_map"][HEAD]
    assert holder == SHARDS[-1]
    for path in [*SHARDS[:3], INDEX, "model/config.json"]:  # untouched: same tree entries, same bytes
        assert after[path] == entries[path], path
        assert sha256(repo.root / path) == files[path], path
    assert after[holder] != entries[holder] and sorted(after) == sorted(entries)
    assert repo.status().clean
    _as_checked_out(repo)
    assert repo.status().clean


def test_a_tensor_changing_dtype_keeps_its_shard_and_the_index_totals_follow(repo, sharded):
    name = "model.layers.0.self_attn.q_proj.weight"
    entries = repo.snapshot()
    repo.commit_state_dict({name: sharded[name].float()}, model="model", message="fp32 q")
    expected = dict(sharded, **{name: sharded[name].float()})
    assert _same(repo.state_dict(), expected)
    after = repo.snapshot()
    assert [p for p in SHARDS if after[p] != entries[p]] == [SHARDS[0]]
    index = _index(repo)
    assert index["metadata"] == _totals(expected)
    assert index["weight_map"] == _index(repo, "HEAD~1")["weight_map"]
    assert json.loads((repo.root / INDEX).read_text()) == index and repo.status().clean


def test_a_new_tensor_joins_the_last_shard_and_the_index(repo, sharded):
    extra = torch.randn(8, 64).to(torch.bfloat16)
    entries = repo.snapshot()
    repo.commit_state_dict({"extra.weight": extra}, model="model", message="extra")
    expected = dict(sharded, **{"extra.weight": extra})
    assert _same(repo.state_dict(), expected)
    assert [p for p in SHARDS if repo.snapshot()[p] != entries[p]] == [SHARDS[-1]]
    index = _index(repo)
    assert index["weight_map"]["extra.weight"] == "model-00004-of-00004.safetensors"
    assert len(index["weight_map"]) == 76 and index["metadata"] == _totals(expected)
    assert repo.status().clean


def test_delete_removes_only_the_tensors_it_names(repo, sharded):
    gone = ["model.layers.7.mlp.up_proj.weight", HEAD]
    repo.commit_state_dict({}, model="model", message="drop two", delete=gone)
    expected = {k: v for k, v in sharded.items() if k not in gone}
    assert _same(repo.state_dict(), expected)
    index = _index(repo)
    assert set(index["weight_map"]) == set(expected) and index["metadata"] == _totals(expected)
    assert repo.status().clean
    _as_checked_out(repo)


def test_bad_deletes_are_refused_and_change_nothing(repo, sharded):
    head, files = repo.refs.head(), tree_hashes(repo.root)
    with pytest.raises(BadInputError, match="cannot delete 'nope': not a tensor of model 'model'"):
        repo.commit_state_dict({}, model="model", message="m", delete=["nope"])
    sd = repo.state_dict(names=[HEAD])
    with pytest.raises(BadInputError, match="both given and named to delete"):
        repo.commit_state_dict(sd, model="model", message="m", delete=[HEAD])
    with pytest.raises(BadInputError, match="a list of tensor names"):
        repo.commit_state_dict({}, model="model", message="m", delete=HEAD)
    assert repo.refs.head() == head and tree_hashes(repo.root) == files and repo.status().clean


def test_replace_makes_the_state_dict_the_whole_model(repo, sharded):
    sd = repo.state_dict(names=[HEAD])
    repo.commit_state_dict(sd, model="model", message="only the head", replace=True)
    assert _same(repo.state_dict(), sd)
    snap = repo.snapshot()
    assert [p for p in SHARDS if p in snap] == [SHARDS[-1]]
    assert not any((repo.root / p).exists() for p in SHARDS[:3])
    index = _index(repo)
    assert index["weight_map"] == {HEAD: "model-00004-of-00004.safetensors"}
    assert index["metadata"] == _totals(sd)  # total_parameters too: not left stale
    assert repo.status().clean


def test_a_tied_output_embedding_is_not_added(repo):
    sd = llama_state_dict(LlamaSpec(layers=1))
    del sd[HEAD]
    write_model(repo.root / "model", sd, config={"model_type": "llama", "tie_word_embeddings": True})
    for f in (repo.root / "model").iterdir():
        touch_later(f)
    repo.add(["model"])
    repo.commit("tied")
    module_view = dict(sd)
    module_view["model.norm.weight"] = sd["model.norm.weight"] * 2
    module_view[HEAD] = module_view["model.embed_tokens.weight"]  # nn.Module.state_dict() lists a tied weight twice
    repo.commit_state_dict(module_view, model="model", message="step")
    assert HEAD not in repo.state_dict() and repo.status().clean
    loaded = dict(module_view, **{HEAD: module_view["model.embed_tokens.weight"].clone()})  # equal, not shared
    loaded["model.norm.weight"] = sd["model.norm.weight"] * 3
    repo.commit_state_dict(loaded, model="model", message="step 2")
    assert HEAD not in repo.state_dict()
    untied = dict(loaded, **{HEAD: torch.zeros_like(sd["model.embed_tokens.weight"])})
    repo.commit_state_dict(untied, model="model", message="untie")  # a different tensor: added
    assert torch.equal(repo.state_dict(names=[HEAD])[HEAD], untied[HEAD])


def test_a_saved_lm_head_keeps_being_updated(repo, llama):
    commit_model(repo, llama, "base")
    sd = dict(llama, **{HEAD: llama["model.embed_tokens.weight"]})
    repo.commit_state_dict(sd, model="model", message="tied now")
    assert torch.equal(repo.state_dict(names=[HEAD])[HEAD], llama["model.embed_tokens.weight"])


def test_a_file_whose_tensors_keep_their_dtypes_and_shapes_keeps_its_header_bytes(repo):
    """A header another writer formatted its own way (indented, metadata last, data not in
    name order) stays byte for byte when a tensor of the file changes values only."""
    a, b = torch.randn(4, 8), torch.randn(3)
    header = json.dumps(
        {
            "b": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
            "a": {"dtype": "F32", "shape": [4, 8], "data_offsets": [12, 140]},
            "__metadata__": {"format": "pt"},
        },
        indent=1,
    ).encode()
    header += b" " * (-len(header) % 8)
    path = repo.root / "model" / "model.safetensors"
    path.parent.mkdir()
    path.write_bytes(len(header).to_bytes(8, "little") + header + b.numpy().tobytes() + a.numpy().tobytes())
    repo.add(["model"])
    repo.commit("base")
    repo.commit_state_dict({"a": a * 2}, model="model", message="a doubled")
    expected = len(header).to_bytes(8, "little") + header + b.numpy().tobytes() + (a * 2).numpy().tobytes()
    assert path.read_bytes() == expected and repo.status().clean
    _as_checked_out(repo)


# -- item 5: commit_state_dict of what the branch holds is refused ------------------------------


def test_the_same_state_dict_twice_is_nothing_to_commit(repo: Repository) -> None:
    sd = llama_state_dict(TINY, seed=1)
    commit_model(repo, sd, "v1")
    first = repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="checkpoint 1")
    with pytest.raises(MgitError, match="nothing to commit"):
        repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="checkpoint 2")
    assert repo.refs.head() == first
    repo.checkout(create_branch="side")
    repo.checkout("main")
    with pytest.raises(MgitError, match="nothing to commit"):
        repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="again", branch="side")
