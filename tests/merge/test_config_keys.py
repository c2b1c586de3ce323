"""Every key of mergekit 0.1.5's config schema and every mergekit-yaml option is in mgit's table
(mgit.merge.config_keys), honoured or refused by name: a key mergekit adds fails here. The
table in docs/merging.md is the module's; configs giving refused or unknown keys get one line."""

from __future__ import annotations

import os
import types
import typing
from pathlib import Path

import pytest
import yaml
from mergekit.config import MergeConfiguration
from mergekit.options import MergeOptions
from pydantic import BaseModel

from mgit.errors import BadInputError
from mgit.merge import config_keys
from mgit.merge.config import load_config
from mgit.merge.config_keys import CONFIG_KEYS, FEATURES, OPTIONS, covering, option_name, refused_above

DOCS = Path(__file__).resolve().parents[2] / "docs" / "merging.md"
BEGIN, END = "<!-- yaml-keys: begin (mgit.merge.config_keys.markdown_table) -->", "<!-- yaml-keys: end -->"


def _models_in(annotation) -> list[tuple[str, type[BaseModel] | None]]:
    """(path suffix, model) of what an annotation holds: ``[]`` a list's items, ``.*`` a mapping's
    values; None for a scalar."""
    origin = typing.get_origin(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [("", annotation)]
    if origin in (typing.Union, types.UnionType, typing.Literal) or origin is None:
        args = typing.get_args(annotation) if origin not in (typing.Literal, None) else ()
        return [found for arg in args for found in _models_in(arg)]
    if origin in (list, tuple):
        return [("[]" + s, m) for arg in typing.get_args(annotation) for s, m in _models_in(arg) if m is not None]
    if origin is dict:
        value = typing.get_args(annotation)[1]
        return [(".*", None)] + [(".*" + s, m) for s, m in _models_in(value) if m is not None]
    return []


def schema_paths(model: type[BaseModel], prefix: str = "") -> set[str]:
    """Every key path of a pydantic model, as config_keys writes them."""
    paths = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}.{name}" if prefix else name
        paths.add(path)
        for suffix, inner in _models_in(info.annotation):
            if inner is None:
                paths.add(path + suffix)
            else:
                paths |= schema_paths(inner, path + suffix)
    return paths


SCHEMA = schema_paths(MergeConfiguration)


def test_the_schema_walk_finds_the_nested_keys():
    assert {"models[].model.lora.path", "parameters.*[].filter", "modules.*.slices[].sources[].layer_range"} <= SCHEMA
    assert "tokenizer.tokens.*.source.token_id" in SCHEMA and "slices[].residual_weight" in SCHEMA


@pytest.mark.parametrize("path", sorted(SCHEMA))
def test_every_mergekit_key_is_honoured_or_refused(path):
    key = covering(path)
    assert key is not None, f"mergekit's config key {path} is not in mgit.merge.config_keys"
    assert key.reason and key.status in ("honoured", "refused")


def test_the_table_lists_only_mergekit_keys():
    assert set(CONFIG_KEYS) <= SCHEMA, sorted(set(CONFIG_KEYS) - SCHEMA)


@pytest.mark.parametrize("feature", FEATURES, ids=lambda f: f.name)
def test_a_landed_feature_leaves_no_key_uncovered(feature):
    """Flipping one feature (``lands=True``) is the whole edit: its keys are all listed already."""
    landed = feature.lands
    object.__setattr__(feature, "lands", True)  # the flip, undone below (features are frozen)
    try:
        assert [p for p in SCHEMA if covering(p) is None] == []
    finally:
        object.__setattr__(feature, "lands", landed)


def test_every_mergekit_yaml_option_is_honoured_or_refused():
    assert set(OPTIONS) == {option_name(f) for f in MergeOptions.model_fields}


def test_docs_table_is_the_modules():
    text = DOCS.read_text("utf-8")
    table = config_keys.markdown_table()
    head, sep, rest = text.partition(BEGIN)
    _, sep2, tail = rest.partition(END)
    assert sep and sep2, f"docs/merging.md lacks the {BEGIN} … {END} markers"
    if os.environ.get("MGIT_UPDATE_GOLDEN"):
        DOCS.write_text(f"{head}{BEGIN}\n{table}\n{END}{tail}", "utf-8")
        return
    assert rest[: rest.index(END)].strip() == table, (
        "docs/merging.md's YAML keys table: MGIT_UPDATE_GOLDEN=1 rewrites it"
    )


# -- load_config refuses by name ------------------------------------------------------------------


def _load(tmp_path, doc) -> str:
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(BadInputError) as info:
        load_config(path)
    message = str(info.value)
    assert "\n" not in message
    return message


MODELS = [{"model": "main"}, {"model": "math", "parameters": {"weight": 0.5}}]


@pytest.mark.parametrize(
    ("extra", "named", "why"),
    [
        (
            {"tokenizer": {"source": {"model": {"path": "math", "revision": "v1"}}}},
            "tokenizer.source.model.revision",
            "a Hugging Face revision",
        ),
        ({"modules": {"text": {"models": MODELS}}}, "modules.text.models", "give `models:` at the top level"),
        (
            {"slices": [{"sources": [{"model": "main", "layer_range": [0, 1]}], "residual_weight": 0.5}]},
            "slices[0].residual_weight",
            "residual weight of a slice is not supported",
        ),
        ({"parameters": {"weight": {"filter": "mlp", "value": 1, "colour": 2}}}, "parameters.weight.colour", "no such"),
        ({"merge_methd": "linear"}, "merge_methd", "unknown key"),
    ],
)
def test_a_refused_or_unknown_key_is_named(tmp_path, extra, named, why):
    message = _load(tmp_path, {"merge_method": "linear", "models": MODELS} | extra)
    assert f" {named}" in message and why in message, message


def test_a_lora_is_taken_and_a_hub_revision_and_an_architecture_override_are_named(tmp_path):
    path = tmp_path / "lora.yml"
    mapping = {"model": {"model": {"path": "math"}, "lora": {"path": "adapters/math"}}}
    path.write_text(yaml.safe_dump({"merge_method": "linear", "models": ["math+adapters/math", mapping]}))
    assert [m.ref for m in load_config(path).models] == ["math+adapters/math"] * 2
    adapter_rev = [{"model": {"model": "math", "lora": {"path": "org/adapter", "revision": "v2"}}}]
    assert "models[0].model.lora.revision: a Hugging Face revision of the adapter" in _load(
        tmp_path, {"merge_method": "linear", "models": adapter_rev}
    )
    rev = [{"model": {"model": {"path": "org/name", "revision": "v1"}}}]
    assert "models[0].model.model.revision: a Hugging Face revision" in _load(
        tmp_path, {"merge_method": "linear", "models": rev}
    )
    arch = {"merge_method": "linear", "models": [{"model": {"model": "math", "override_architecture": "X"}}]}
    assert "override_architecture" in _load(tmp_path, arch)


def test_the_mapping_form_of_a_model_and_null_keys_are_taken(tmp_path):
    path = tmp_path / "merge.yml"
    doc = {
        "merge_method": "linear",
        "base_model": {"model": {"path": "main"}},
        "models": [{"model": {"model": "math"}, "parameters": {"weight": [{"filter": "mlp", "value": 1}]}}],
        "tokenizer_source": None,
        "slices": None,
    }
    path.write_text(yaml.safe_dump(doc))
    cfg = load_config(path)
    assert cfg.base == "main" and [m.ref for m in cfg.models] == ["math"]


def test_only_refused_keys_hide_what_lies_under_them():
    assert refused_above("modules.*.models[].model") is CONFIG_KEYS["modules.*.models"]
    assert refused_above("slices[].sources[].layer_range") is None
    assert refused_above("models[].parameters.*") is None
