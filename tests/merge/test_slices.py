"""mergekit's `slices:` configs: output layers assembled from ranges of the sources, each slice
merged with its own parameters, the result equal to mergekit's on the same config (mergekit 0.1.5's
``run_merge``, what ``mergekit-yaml`` calls, in-process on tiny transformers Llama models), and
copied layers costing no new chunk."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.mergekit_ref import bits
from helpers.models import LlamaSpec, llama_state_dict, write_model
from helpers.slice_configs import LAYERS, based, blended, frankenmerge, load_model, merged, modular, write_models
from safetensors.torch import load_file

from mgit.errors import BadInputError
from mgit.merge.slices import OutputSlice, SliceSource, output_files, output_tensors, parse_slices, renumbered


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> dict[str, Path]:
    """Two tiny Llama models (6 layers, hidden 32, bf16; alpha in two shards with an index), each
    with the config.json transformers writes."""
    from transformers import LlamaConfig

    config = LlamaConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=LAYERS,
        num_attention_heads=4,
        num_key_value_heads=2,
        vocab_size=64,
        tie_word_embeddings=False,
        dtype="bfloat16",
        architectures=["LlamaForCausalLM"],
    )
    out = write_models(tmp_path_factory.mktemp("sources"), None)
    for directory in out.values():
        config.save_pretrained(directory)
    return out


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[str, Path]:
    """The same models with a minimal config.json (no transformers: for the tests not comparing)."""
    return write_models(tmp_path_factory.mktemp("plain"), {"model_type": "llama", "num_hidden_layers": LAYERS})


def mergekit_run(config: dict, out: Path) -> Path:
    """mergekit's merge of ``config`` into ``out`` (the code mergekit-yaml runs), on the CPU."""
    from mergekit.config import MergeConfiguration
    from mergekit.merge import run_merge
    from mergekit.options import MergeOptions

    options = MergeOptions(copy_tokenizer=False, write_model_card=False, quiet=True)
    run_merge(MergeConfiguration.model_validate(config), str(out), options)
    return out


def assert_same_model(ours: dict[str, torch.Tensor], config: dict, out: Path) -> None:
    theirs = load_model(out)
    assert sorted(ours) == sorted(theirs)
    for name, tensor in theirs.items():
        assert ours[name].dtype == tensor.dtype and torch.equal(bits(ours[name]), bits(tensor)), name
    expected = json.loads((out / "config.json").read_text())
    assert sorted(config) == sorted(expected)
    assert config["num_hidden_layers"] == expected["num_hidden_layers"] and config["dtype"] == expected["dtype"]


@pytest.mark.slow  # transformers and mergekit imported: ~20 s on a loaded machine
def test_frankenmerge_equals_mergekit_and_copies_layers_without_new_chunks(started, models, tmp_path):
    config = frankenmerge(models)
    before = repo_chunks(started)
    commit, ours, cfg = merged(started, config, tmp_path, "franken")
    assert_same_model(ours, cfg, mergekit_run(config, tmp_path / "mk-franken"))
    assert cfg["num_hidden_layers"] == 8
    alpha, beta = load_model(models["alpha"]), load_model(models["beta"])
    assert torch.equal(ours["model.layers.5.mlp.up_proj.weight"], beta["model.layers.3.mlp.up_proj.weight"])
    assert torch.equal(ours["model.embed_tokens.weight"], alpha["model.embed_tokens.weight"])
    assert torch.equal(ours["lm_head.weight"], beta["lm_head.weight"])  # after the layers: the last slice's
    # every tensor is a source's, copied: the merge stores no chunk, and du says so
    imported = repo_chunks(started)
    assert repo_chunks(started, commit) <= imported and len(imported - before) > 0
    index = json.loads((started.root / "model" / "model.safetensors.index.json").read_text())
    assert sorted(index["weight_map"]) == sorted(ours)  # the donor's two shards and index, rewritten
    for file in set(index["weight_map"].values()):
        held = load_file(started.root / "model" / file)
        assert all(index["weight_map"][name] == file for name in held)
    assert started.du(commit).new_stored_bytes == 0
    assert " 0 bytes " in invoke("du", commit, cwd=started.root, check=True).stdout


def repo_chunks(repo, commit: str | None = None) -> set[str]:
    """Every chunk in the store, or those ``commit``'s files use."""
    from mgit.maintenance.du import commit_chunks

    if commit is not None:
        return set(commit_chunks(repo.graph, commit)[1])
    return {cid for idx in repo.store.indexes() for cid in idx.ids()}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("make", "layers"),
    [(blended, 5), (based, 4), (modular, 6)],
    ids=["parameters-by-level", "task-arithmetic-over-a-base", "modules"],
)
def test_slices_with_parameters_equal_mergekit(started, models, tmp_path, make, layers):
    config = make(models)
    _, ours, cfg = merged(started, config, tmp_path, "merged")
    assert_same_model(ours, cfg, mergekit_run(config, tmp_path / "mergekit"))
    assert cfg["num_hidden_layers"] == layers


def test_plan_record_names_each_tensors_sources(started, plain, tmp_path):
    models = plain
    path = tmp_path / "franken.yml"
    path.write_text(yaml.safe_dump(frankenmerge(models)))
    planned = started.merge_plan([], None, config=path)
    record = {t.name: t for t in planned.record().tensors}
    (source,) = record["model.layers.6.self_attn.q_proj.weight"].sources["experts"]
    assert source["model"] == str(models["beta"]) and source["tensor"] == "model.layers.4.self_attn.q_proj.weight"
    assert len(record) == 2 + 8 * 9 + 1
    proc = invoke("merge", "--config", str(path), "--dry-run", "--json", cwd=started.root, check=True)
    assert '"model.layers.4.self_attn.q_proj.weight"' in proc.stdout
    text = invoke("merge", "--config", str(path), "--dry-run", cwd=started.root, check=True).stdout
    assert "from" in text and "expert reads" in text and "beta" in text  # each tensor's source, named


def test_bad_layer_ranges_refused_in_one_line(started, plain, tmp_path):
    a = str(plain["alpha"])
    cases = {
        "beyond": ([[0, 4], [4, 7]], "goes beyond"),
        "empty": ([[0, 4], [3, 3]], "empty"),
        "uneven": (None, "same number of layers"),
    }
    head = started.ctx.refs.head()
    for key, (ranges, message) in cases.items():
        if ranges is None:
            slices = [{"sources": [{"model": a, "layer_range": [0, 2]}, {"model": a, "layer_range": [0, 3]}]}]
        else:
            slices = [{"sources": [{"model": a, "layer_range": r}]} for r in ranges]
        path = tmp_path / f"{key}.yml"
        path.write_text(yaml.safe_dump({"merge_method": "passthrough", "slices": slices}))
        proc = invoke("merge", "--config", str(path), cwd=started.root)
        assert proc.returncode == 2 and message in proc.stderr and len(proc.stderr.splitlines()) == 1, proc.stderr
    assert started.ctx.refs.head() == head and "franken" not in started.branches()


def test_output_tensors_renumber_layers_and_t():
    names = {
        "A": ["model.embed_tokens.weight", *[f"model.layers.{i}.w" for i in range(4)], "model.norm.weight"],
        "B": ["model.embed_tokens.weight", *[f"model.layers.{i}.w" for i in range(6)], "model.norm.weight"],
    }
    slices = (
        OutputSlice((SliceSource("A", 0, 3),)),
        OutputSlice((SliceSource("B", 4, 5),)),
    )
    out = output_tensors(slices, names, None)
    assert [o.name for o in out] == [
        "model.embed_tokens.weight",
        "model.layers.0.w",
        "model.layers.1.w",
        "model.layers.2.w",
        "model.layers.3.w",
        "model.norm.weight",
    ]
    assert [o.t for o in out] == [0.0, 0.0, 0.5, 1.0, 1.0, 0.0]
    assert out[4].sources[0].tensor == "model.layers.4.w" and out[-1].sources[0].model == "B"
    with pytest.raises(BadInputError, match="beyond A's 4 layers"):
        output_tensors((OutputSlice((SliceSource("A", 2, 5),)),), names, None)
    assert renumbered("transformer.h.3.attn.weight", 12) == "transformer.h.12.attn.weight"


def test_output_files_keep_the_donors_shards():
    donor = {"m/a.safetensors": ["embed", "layers.0.w", "layers.1.w"], "m/b.safetensors": ["layers.2.w", "norm"]}
    out = output_files(donor, ["embed", "layers.0.w", "layers.1.w", "layers.2.w", "layers.3.w", "norm"])
    assert out == {
        "m/a.safetensors": ["embed", "layers.0.w", "layers.1.w"],
        "m/b.safetensors": ["layers.2.w", "layers.3.w", "norm"],
    }
    assert output_files(donor, ["embed", "layers.0.w"]) == {"m/a.safetensors": ["embed", "layers.0.w"]}


def test_parse_slices_refusals():
    with pytest.raises(BadInputError, match="layer_range must be"):
        parse_slices([{"sources": [{"model": "a", "layer_range": [0]}]}], "c.yml")
    with pytest.raises(BadInputError, match="residual_weight"):
        parse_slices([{"sources": [{"model": "a", "layer_range": [0, 1]}], "residual_weight": 0.5}], "c.yml")


def test_config_layer_types_follow_the_layers(started, tmp_path):
    """A per-layer ``layer_types`` list is assembled from each output layer's source (mergekit
    leaves it at the donor's length, which transformers then refuses)."""
    kinds = {"alpha": ["full_attention"] * LAYERS, "beta": ["sliding_attention", "full_attention"] * (LAYERS // 2)}
    models = write_models(tmp_path / "src", {"model_type": "qwen2", "num_hidden_layers": LAYERS})
    for name, directory in models.items():
        config = {"model_type": "qwen2", "num_hidden_layers": LAYERS, "layer_types": kinds[name]}
        (directory / "config.json").write_text(json.dumps(config))
    config = frankenmerge(models)
    _, _, cfg = merged(started, config, tmp_path, "typed")
    assert cfg["num_hidden_layers"] == 8 and cfg["dtype"] == "bfloat16"
    assert cfg["layer_types"] == kinds["alpha"][0:4] + kinds["beta"][2:6]


def test_base_model_of_a_slice_must_be_among_its_sources(started, plain, tmp_path):
    a, b = str(plain["alpha"]), str(plain["beta"])
    config = {
        "merge_method": "task_arithmetic",
        "base_model": a,
        "parameters": {"weight": 0.5},
        "slices": [
            {"sources": [{"model": a, "layer_range": [0, 2]}, {"model": b, "layer_range": [0, 2]}]},
            {"sources": [{"model": b, "layer_range": [2, 4]}]},
        ],
    }
    path = tmp_path / "based.yml"
    path.write_text(yaml.safe_dump(config))
    proc = invoke("merge", "--config", str(path), "-b", "based", cwd=started.root)
    assert proc.returncode == 2 and "slices[1] needs a source from its base model" in proc.stderr
    assert len(proc.stderr.splitlines()) == 1 and "based" not in started.branches()


def test_shards_left_empty_are_removed_and_the_index_rewritten(started, tmp_path):
    """A slice of the donor's first layers: its shards holding only later layers go, from the
    commit and the working tree, and the index names only what is left."""
    spec = LlamaSpec(layers=LAYERS, hidden=32, intermediate=64, vocab=64)
    state = llama_state_dict(spec, seed=4)
    late = [n for n in state if n.startswith(("model.layers.4.", "model.layers.5."))]
    ordered = {n: state[n] for n in [n for n in state if n not in late] + late}  # the last shard: layers 4-5 only
    donor = tmp_path / "donor"
    write_model(donor, ordered, shards=4, config={"model_type": "llama", "num_hidden_layers": LAYERS})
    config = {"merge_method": "passthrough", "slices": [{"sources": [{"model": str(donor), "layer_range": [0, 2]}]}]}
    commit, ours, cfg = merged(started, config, tmp_path, "short")
    index = json.loads((started.root / "model" / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in (started.root / "model").glob("*.safetensors"))
    assert files == sorted(set(index["weight_map"].values())) and "model-00004-of-00004.safetensors" not in files
    assert sorted(index["weight_map"]) == sorted(ours) and cfg["num_hidden_layers"] == 2
    tree = started.ctx.snapshot(commit)
    assert "model/model-00004-of-00004.safetensors" not in tree
    assert all(torch.equal(ours[n], state[n]) for n in ours)


def test_sources_of_another_architecture_are_refused_before_any_tensor(started, plain, tmp_path):
    """The pre-flight compares every source's config.json with the donor's, as for models: merges."""
    other = tmp_path / "other"
    spec = LlamaSpec(layers=LAYERS, hidden=32, intermediate=64, vocab=64)
    write_model(other, llama_state_dict(spec, seed=5), config={"model_type": "mistral", "num_hidden_layers": LAYERS})
    config = frankenmerge(plain)
    config["slices"][1]["sources"][0]["model"] = str(other)
    path = tmp_path / "crimes.yml"
    path.write_text(yaml.safe_dump(config))
    with pytest.raises(BadInputError, match=r"source .*other: config.json architecture None \(mistral\) differs"):
        started.merge([], None, config=path, branch="crimes")
    assert "crimes" not in started.branches()
    started.merge([], None, config=path, branch="crimes", allow_crimes=True)
    assert "crimes" in started.branches()


def test_a_tokenizer_key_in_a_slices_merge_is_refused(started, plain, tmp_path):
    path = tmp_path / "tok.yml"
    path.write_text(yaml.safe_dump(frankenmerge(plain) | {"tokenizer_source": "base"}))
    with pytest.raises(BadInputError, match="tokenizer keys in a `slices:` merge are not supported yet"):
        started.merge([], None, config=path, branch="tok")
