"""`slices:` merge configs and the tiny Llama models they slice (alpha in two shards with an
index, beta in one): the inputs of tests/merge/test_slices.py and test_verify_features.py."""

from __future__ import annotations

import json
from pathlib import Path

import torch
import yaml
from safetensors.torch import load_file

from helpers.models import LlamaSpec, llama_state_dict, write_model

LAYERS = 6


def write_models(root: Path, config: dict | None) -> dict[str, Path]:
    """alpha (two shards and an index) and beta, 6 layers, hidden 32, bf16."""
    spec = LlamaSpec(layers=LAYERS, hidden=32, intermediate=64, vocab=64)
    for seed, name in enumerate(("alpha", "beta")):
        write_model(root / name, llama_state_dict(spec, seed=seed), shards=2 - seed, config=config)
    return {"alpha": root / "alpha", "beta": root / "beta"}


def load_model(directory: Path) -> dict[str, torch.Tensor]:
    """Every tensor of a model directory, whatever its shards."""
    return {k: v for f in sorted(directory.glob("*.safetensors")) for k, v in load_file(f).items()}


def frankenmerge(models: dict[str, Path]) -> dict:
    return {
        "merge_method": "passthrough",
        "dtype": "bfloat16",
        "slices": [
            {"sources": [{"model": str(models["alpha"]), "layer_range": [0, 4]}]},
            {"sources": [{"model": str(models["beta"]), "layer_range": [2, 6]}]},
        ],
    }


def blended(models: dict[str, Path]) -> dict:
    """Slices of two sources each, parameters at every level: gradients over a slice's layers,
    filters, a source's own weight over its slice's and the config's."""
    a, b = str(models["alpha"]), str(models["beta"])
    return {
        "merge_method": "linear",
        "dtype": "bfloat16",
        "parameters": {"weight": 1.0, "normalize": False},
        "slices": [
            {
                "sources": [
                    {"model": a, "layer_range": [0, 3], "parameters": {"weight": [0.2, 0.9]}},
                    {"model": b, "layer_range": [1, 4]},
                ],
                "parameters": {"weight": 0.5},
            },
            {
                "sources": [{"model": b, "layer_range": [4, 6]}, {"model": a, "layer_range": [3, 5]}],
                "parameters": {"weight": [{"filter": "mlp", "value": [0.3, 0.6]}, {"value": 0.7}]},
            },
        ],
    }


def based(models: dict[str, Path]) -> dict:
    """task_arithmetic over a base among each slice's sources (its layers the base's layers)."""
    a, b = str(models["alpha"]), str(models["beta"])
    return {
        "merge_method": "task_arithmetic",
        "base_model": a,
        "dtype": "bfloat16",
        "slices": [
            {
                "sources": [{"model": a, "layer_range": [0, 2]}, {"model": b, "layer_range": [2, 4]}],
                "parameters": {"weight": [0.3, 1.2]},
            },
            {"sources": [{"model": b, "layer_range": [0, 2]}, {"model": a, "layer_range": [4, 6]}]},
        ],
        "parameters": {"weight": 0.6},
    }


def merged(repo, config: dict, tmp_path: Path, branch: str) -> tuple[str, dict[str, torch.Tensor], dict]:
    path = tmp_path / f"{branch}.yml"
    path.write_text(yaml.safe_dump(config))
    commit = repo.merge([], None, config=path, branch=branch)
    return commit, load_model(repo.root / "model"), json.loads((repo.root / "model" / "config.json").read_text())


def modular(models: dict[str, Path]) -> dict:
    """``modules:`` (the one module of a text model, ``default``): its parameters come between
    the slices' and the config's; a filter matching nothing falls through to the config's."""
    a, b = str(models["alpha"]), str(models["beta"])
    first = blended(models)["slices"][0]
    second = {"sources": [{"model": a, "layer_range": [3, 6]}, {"model": b, "layer_range": [0, 3]}]}
    return {
        "merge_method": "linear",
        "dtype": "bfloat16",
        "parameters": {"weight": 1.0, "normalize": False},
        "modules": {
            "default": {
                "slices": [first, second],
                "parameters": {"weight": [{"filter": "self_attn", "value": [0.25, 0.75]}]},
            }
        },
    }
