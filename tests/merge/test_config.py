"""mergekit YAML configs: filters and per-layer gradients mean what they mean to mergekit."""

from __future__ import annotations

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.models import frozen_finetune, llama_state_dict, touch_later, write_model
from mergekit.config import ConditionalParameter, evaluate_setting
from mergekit.merge_methods.api import merge_tensors

from mgit.errors import BadInputError
from mgit.merge.config import evaluate, layer_position


def as_mergekit(setting):
    """mergekit reads filter lists as pydantic ConditionalParameter objects."""
    if isinstance(setting, list) and setting and all(isinstance(c, dict) for c in setting):
        return [ConditionalParameter(**c) for c in setting]
    return setting


@pytest.fixture
def setup(repo):
    base = llama_state_dict()
    write_model(repo.root / "model", base)
    repo.add(["model"])
    repo.commit("base")
    tuned = {}
    for i, name in enumerate(("math", "code")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        tuned[name] = frozen_finetune(base, {i}, seed=40 + i)
        write_model(repo.root / "model", tuned[name])
        touch_later(repo.root / "model" / "model.safetensors")
        repo.add(["model"])
        repo.commit(name)
    repo.checkout("main")
    return repo, base, tuned


CONFIG = {
    "merge_method": "ties",
    "base_model": "main",
    "models": [
        {"model": "main"},
        {"model": "math", "parameters": {"density": [1.0, 0.7, 0.1], "weight": 1.0}},
        {"model": "code", "parameters": {"density": 0.5, "weight": [{"filter": "mlp", "value": 0.5}, {"value": 0.25}]}},
    ],
    "parameters": {"normalize": True},
    "dtype": "bfloat16",
}


def test_gradients_and_filters_equal_mergekit(setup, tmp_path):
    repo, base, tuned = setup
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump(CONFIG))
    commit = repo.merge([], None, config=path, branch="merged")
    got = repo.state_dict(commit)
    layers = 4
    float_ok = lambda v: float(v)  # noqa: E731
    for name in base:
        layer = int(name.split(".")[2]) if name.startswith("model.layers.") else None
        t = 0 if layer is None else layer / (layers - 1)
        params = {"normalize": True}
        for key in ("density", "weight"):
            params[key] = [
                evaluate_setting(name, as_mergekit(m["parameters"][key]), t, validate=float_ok)
                for m in CONFIG["models"][1:]
            ]
        want = merge_tensors(
            [base[name], tuned["math"][name], tuned["code"][name]],
            "ties",
            parameters=params,
            base_index=0,
            dtype=torch.bfloat16,
        )
        assert torch.equal(got[name], want), name
    record = repo.merge_record(commit)
    assert record["config"]["merge_method"] == "ties"
    per_tensor = {t["name"]: t["parameters"] for t in record["tensors"]}
    assert per_tensor["model.layers.1.mlp.up_proj.weight"]["weight"] == [1.0, 0.5]
    assert per_tensor["model.layers.1.self_attn.q_proj.weight"]["weight"] == [1.0, 0.25]
    assert repo.graph.commit(commit).parents == (repo.resolve("main"), repo.resolve("math"), repo.resolve("code"))


@pytest.mark.parametrize(
    "setting",
    [0.3, [0.0, 1.0], [1, 0.5, 0.25, 0], [{"filter": "mlp", "value": [0, 1]}, {"value": 2}], [True, False], []],
)
@pytest.mark.parametrize("name", ["model.layers.2.mlp.up_proj.weight", "model.embed_tokens.weight", ""])
def test_evaluate_agrees_with_mergekit(setting, name):
    t = layer_position(name, 7)
    mine = evaluate(setting, name, t)
    theirs = evaluate_setting(name, as_mergekit(setting), t, validate=lambda v: v)
    assert mine == theirs


def test_paths_are_imported_as_root_commits(setup, tmp_path):
    repo, base, tuned = setup
    outside = tmp_path / "chat-model"
    chat = frozen_finetune(base, {3}, seed=50)
    write_model(outside, chat)
    config = {
        "merge_method": "task_arithmetic",
        "base_model": "main",
        "models": [
            {"model": "math", "parameters": {"weight": 0.5}},
            {"model": str(outside), "parameters": {"weight": 0.5}},
        ],
    }
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(config))
    commit = repo.merge([], None, config=path)
    imported = [r for r in repo.graph.repo.refs.allkeys() if r.startswith(b"refs/imports/")]
    assert len(imported) == 1
    root = repo.graph.repo.refs[imported[0]].decode()
    assert repo.graph.commit(root).parents == () and repo.graph.commit(commit).parents[2] == root
    assert torch.equal(repo.state_dict(root, model="model")["lm_head.weight"], chat["lm_head.weight"])


def test_bad_configs(setup, tmp_path):
    repo, _, _ = setup
    cases = {
        "modules": ({"merge_method": "linear", "modules": {"decoder": {"slices": []}}}, "the one module `default`"),
        "slices": ({"merge_method": "linear", "slices": [{"sources": []}]}, "needs `sources:`"),
        "nomethod": ({"models": [{"model": "math"}]}, "merge_method is required"),
        "unknownrev": (
            {"merge_method": "linear", "models": [{"model": "ghost", "parameters": {"weight": 1}}]},
            "unknown revision",
        ),
        "unknownparam": (
            {"merge_method": "linear", "models": [{"model": "math", "parameters": {"weigth": 1}}]},
            "unknown parameter",
        ),
    }
    for key, (doc, message) in cases.items():
        path = tmp_path / f"{key}.yml"
        path.write_text(yaml.safe_dump(doc))
        with pytest.raises(Exception, match=message):
            repo.merge([], None, config=path, branch=f"b-{key}")
    (tmp_path / "broken.yml").write_text("merge_method: [unclosed")
    with pytest.raises(BadInputError, match="not valid YAML"):
        repo.merge([], None, config=tmp_path / "broken.yml")
    proc = invoke("merge", "--config", str(tmp_path / "modules.yml"), cwd=repo.root)
    assert proc.returncode == 2 and "modules" in proc.stderr and len(proc.stderr.splitlines()) == 1


def test_cli_config_dry_run(setup, tmp_path):
    repo, _, _ = setup
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump(CONFIG))
    proc = invoke("merge", "--config", str(path), "--dry-run", "--json", cwd=repo.root, check=True)
    assert '"config"' in proc.stdout and '"merge_method": "ties"' in proc.stdout
    done = invoke("merge", "--config", str(path), "-b", "cfg", cwd=repo.root, check=True)
    assert "merged 2 expert(s) with ties" in done.stdout
