"""`MODEL+LORA` merge inputs (mergekit's model reference with a PEFT adapter), compared with
mergekit 0.1.5 on a tiny real Llama and real adapters made by peft (B drawn at random, so the
update is not zero): the adapter applied alone (mergekit's ``ModelReference.merged``, in
process: f32 within 1e-6, bf16 bit for bit), and whole merges with `mergekit-yaml` run here,
the adapters on the base and on an expert, named from the CLI, a config and Python."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import blake3
import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.lora_models import lora_inputs, lora_repo
from safetensors.torch import load_file

from mgit.errors import BadInputError

transformers = pytest.importorskip("transformers")
peft = pytest.importorskip("peft")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """bf16 and f32 base models, an expert, adapters a and b of each base."""
    return lora_inputs(tmp_path_factory.mktemp("lora"))


def _mergekit_applied(model: Path, adapter: Path, cache: Path) -> dict[str, torch.Tensor]:
    """mergekit's own step for MODEL+LORA (ModelReference.merged: peft's merge_and_unload)."""
    from mergekit.common import ModelReference

    merged = ModelReference.parse(f"{model}+{adapter}").merged(cache_dir=str(cache))
    return load_file(Path(merged.model.path) / "model.safetensors")


@pytest.mark.parametrize("tag", ["bf16", "f32"])
@pytest.mark.parametrize("adapter", ["a", "b"])
def test_adapter_applied_as_mergekit_applies_it(inputs, tmp_path, tag, adapter):
    repo = lora_repo(tmp_path / "repo", inputs, tag)
    rev = f"main+{inputs / tag / f'adapter-{adapter}'}" if adapter == "a" else "main+adapters:lora/b"
    planned = repo.merge_plan([rev], "linear", weight=1.0)
    (applied,) = planned.setup.loras
    mine = repo.state_dict(applied.commit)
    theirs = _mergekit_applied(inputs / tag / "base", inputs / tag / f"adapter-{adapter}", tmp_path / "cache")
    base = load_file(inputs / tag / "base" / "model.safetensors")
    assert mine.keys() == theirs.keys() == base.keys()
    changed = [n for n in base if not torch.equal(base[n], theirs[n])]
    assert len(changed) >= 6 and ("lm_head.weight" in changed) == (adapter == "b")
    assert any(n.endswith(".bias") for n in changed) == (adapter == "b")  # bias: lora_only, copied
    for name, t in theirs.items():
        assert mine[name].dtype == t.dtype == base[name].dtype, name
        if tag == "bf16":
            assert torch.equal(mine[name], t), name
        else:
            torch.testing.assert_close(mine[name], t, rtol=1e-6, atol=0)


@pytest.fixture(scope="module")
def mergekit_yaml_result(inputs, tmp_path_factory):
    """`mergekit-yaml` of a task arithmetic whose base and first expert carry adapters."""
    out = tmp_path_factory.mktemp("mergekit")
    bf = inputs / "bf16"
    config = _config(f"{bf / 'base'}+{bf / 'adapter-b'}", f"{bf / 'base'}+{bf / 'adapter-a'}", str(bf / "other"))
    (out / "config.yml").write_text(yaml.safe_dump(config))
    env = os.environ | {"HF_HUB_OFFLINE": "1", "HF_HOME": str(out / "hf")}
    args = ["mergekit-yaml", "config.yml", "merged", "--lora-merge-cache", "cache", "--no-copy-tokenizer"]
    done = subprocess.run([*args, "--no-write-model-card"], cwd=out, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    return load_file(out / "merged" / "model.safetensors")


def _config(base: str, first: str, second: str) -> dict[str, object]:
    return {
        "merge_method": "task_arithmetic",
        "base_model": base,
        "models": [{"model": first, "parameters": {"weight": 0.7}}, {"model": second, "parameters": {"weight": 0.5}}],
        "dtype": "bfloat16",
    }


def _assert_bit_equal(mine: dict[str, torch.Tensor], theirs: dict[str, torch.Tensor]) -> None:
    """Every tensor mergekit writes, bit for bit. mergekit's Llama architecture lists no
    attention biases, so its output leaves them out; mgit merges them as any tensor."""
    assert set(mine) - set(theirs) == {n for n in mine if n.endswith("_proj.bias")}
    assert set(theirs) <= set(mine)
    for name, t in theirs.items():
        assert mine[name].dtype == t.dtype and torch.equal(mine[name], t), name


@pytest.mark.slow
def test_merge_with_lora_inputs_equals_mergekit_yaml(inputs, mergekit_yaml_result, tmp_path):
    repo = lora_repo(tmp_path / "repo", inputs)
    bf = inputs / "bf16"
    adapter_a, other = f"main+{bf / 'adapter-a'}", str(bf / "other")
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(_config("main+adapters:lora/b", adapter_a, other)))
    by_config = repo.merge([], None, config=path, branch="by-config", checkout=False)
    _assert_bit_equal(repo.state_dict(by_config), mergekit_yaml_result)

    by_python = repo.merge(
        [adapter_a, other],
        "task_arithmetic",
        "main+adapters:lora/b",
        weight=[0.7, 0.5],
        dtype="BF16",
        branch="by-python",
        checkout=False,
    )
    _assert_bit_equal(repo.state_dict(by_python), mergekit_yaml_result)

    args = ["merge", adapter_a, other, "--method", "task_arithmetic", "--base", "main+adapters:lora/b"]
    invoke(*args, "--weights", "0.7,0.5", "--dtype", "BF16", "-b", "by-cli", "--no-checkout", cwd=repo.root).check()
    _assert_bit_equal(repo.state_dict("by-cli"), mergekit_yaml_result)

    # one applied commit per model and adapter, however often and however the adapter is named
    loras = [r for r in repo.graph.repo.refs.allkeys() if r.startswith(b"refs/imports/lora/")]
    assert len(loras) == 2


def test_plan_record_names_each_adapter_and_input(inputs, tmp_path):
    repo = lora_repo(tmp_path / "repo", inputs)
    bf = inputs / "bf16"
    adapters = repo.resolve("adapters")
    commit = repo.merge(
        [f"main+{bf / 'adapter-a'}"], "task_arithmetic", "main+adapters", weight=0.5, branch="m", checkout=False
    )
    record = repo.merge_record(commit)
    entries = {e["input"]: e for e in record["lora"]}
    assert set(entries) == {"main+adapters", f"main+{bf / 'adapter-a'}"}
    on_base, on_expert = entries["main+adapters"], entries[f"main+{bf / 'adapter-a'}"]
    assert on_base["adapter"] == {"commit": adapters, "dir": "lora/b"}
    assert on_expert["adapter"] == {"path": str(bf / "adapter-a")}
    for entry in (on_base, on_expert):
        assert entry["model"] == repo.resolve("main") and entry["model_dir"] == "model"
    files = ("adapter_config.json", "adapter_model.safetensors")
    assert on_expert["blake3"] == {f: blake3.blake3((bf / "adapter-a" / f).read_bytes()).hexdigest() for f in files}
    assert on_base["blake3"] == {f: blake3.blake3((bf / "adapter-b" / f).read_bytes()).hexdigest() for f in files}
    # the merge's base and expert are the applied commits, whose parents are the model (and adapter)
    assert record["base"] == on_base["commit"] and record["experts"][0]["commit"] == on_expert["commit"]
    assert repo.graph.commit(on_base["commit"]).parents == (repo.resolve("main"), adapters)
    assert repo.graph.commit(on_expert["commit"]).parents == (repo.resolve("main"),)


def test_an_adapter_is_applied_once_however_named(inputs, tmp_path, monkeypatch):
    repo = lora_repo(tmp_path / "repo", inputs)
    (first,) = repo.merge_plan(["main+adapters:lora/b"], "linear", weight=1.0).setup.loras
    monkeypatch.setattr("mgit.ops.merge_lora.apply_adapter", None)  # applying again would fail
    (again,) = repo.merge_plan([f"main+{inputs / 'bf16' / 'adapter-b'}"], "linear", weight=1.0).setup.loras
    assert again.commit == first.commit and again.blake3 == first.blake3
    assert again.adapter == {"path": str(inputs / "bf16" / "adapter-b")}


def test_a_revision_whose_name_holds_plus_wins(inputs, tmp_path):
    repo = lora_repo(tmp_path / "repo", inputs)
    repo.create_branch("main+adapters", "main~0")  # a branch of that very name: taken whole
    planned = repo.merge_plan(["main+adapters", "adapters"], "linear", weight=0.5, model="model")
    assert planned.setup.loras == () and planned.setup.expert_commits == [
        repo.resolve("main"),
        repo.resolve("adapters"),
    ]


def _adapter_with(inputs: Path, tmp_path: Path, **changes: object) -> Path:
    """Adapter a with its config changed."""
    path = tmp_path / "adapter"
    path.mkdir()
    config = json.loads((inputs / "bf16" / "adapter-a" / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps(config | changes))
    (path / "adapter_model.safetensors").write_bytes(
        (inputs / "bf16" / "adapter-a" / "adapter_model.safetensors").read_bytes()
    )
    return path


@pytest.mark.parametrize(
    ("changes", "refused"),
    [
        ({"use_dora": True}, "DoRA (use_dora) not supported"),
        ({"fan_in_fan_out": True}, "fan_in_fan_out (Conv1D targets) not supported"),
        ({"peft_type": "IA3"}, "a IA3 adapter; only LoRA adapters can be applied"),
        ({"r": 8}, "do not fit rank 8"),
    ],
)
def test_adapters_applied_otherwise_are_refused_in_one_line(inputs, tmp_path, changes, refused):
    repo = lora_repo(tmp_path / "repo", inputs)
    adapter = _adapter_with(inputs, tmp_path, **changes)
    before = sorted(repo.graph.repo.refs.allkeys())
    done = invoke("merge", f"main+{adapter}", "--method", "linear", "--weights", "1", cwd=repo.root)
    assert done.exit_code != 0 and refused in done.stderr and len(done.stderr.strip().splitlines()) == 1
    assert sorted(repo.graph.repo.refs.allkeys()) == before


def test_dora_embedding_and_bad_patterns_are_refused():
    from mgit.merge.lora import plan_adapter

    config = {"r": 4, "lora_alpha": 8}
    model = {"model.embed_tokens.weight": (64, 32), "q.weight": (32, 32)}
    with pytest.raises(BadInputError, match="adapts an embedding"):
        plan_adapter(config, {"base_model.model.model.embed_tokens.lora_embedding_A": (4, 64)}, model, "x")
    with pytest.raises(BadInputError, match="DoRA and variants"):
        plan_adapter(config, {"base_model.model.q.lora_magnitude_vector": (32,)}, model, "x")
    with pytest.raises(BadInputError, match="without its pair"):
        plan_adapter(config, {"base_model.model.q.lora_A.weight": (4, 32)}, model, "x")
    pair = {"base_model.model.q.lora_A.weight": (4, 32), "base_model.model.q.lora_B.weight": (32, 4)}
    assert plan_adapter(config, pair, model, "x").targets[0].scaling == 2.0
    with pytest.raises(BadInputError, match="must be positive numbers"):
        plan_adapter(config | {"rank_pattern": {"q": 0}}, pair, model, "x")
    with pytest.raises(BadInputError, match="not a regular expression"):
        plan_adapter(config | {"alpha_pattern": {"q(": 2}}, pair, model, "x")


def test_unknown_model_or_adapter_says_which(inputs, tmp_path):
    repo = lora_repo(tmp_path / "repo", inputs)
    done = invoke("merge", "main+nowhere", "--method", "linear", "--weights", "1", cwd=repo.root)
    assert done.exit_code != 0 and "unknown LoRA adapter 'nowhere'" in done.stderr
    done = invoke("merge", "main+a+b", "--method", "linear", "--weights", "1", cwd=repo.root)
    assert done.exit_code != 0 and "nor MODEL+LORA" in done.stderr
    done = invoke("merge", "main+adapters:lora/c", "--method", "linear", "--weights", "1", cwd=repo.root)
    assert done.exit_code != 0 and "no adapter_config.json in lora/c" in done.stderr
