"""Tokenizer merges (``tokenizer_source``, ``tokenizer:``, ``chat_template``) on tiny Llama models
whose tokenizers differ by added tokens: the merged rows follow the merged vocabulary, and,
against ``mergekit-yaml`` on the same config, mgit's merge holds the same tensors (bit for bit in
bf16), the same vocabulary in its tokenizer files, and gives the same logits once loaded by
transformers."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.mergekit_ref import assert_matches
from helpers.tiny_llama import write_llama
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError
from mgit.graph import records
from mgit.graph.snapshot import read_snapshot

# Every test here builds models with transformers and loads tokenizers with it (~10 s on import);
# the pure row arithmetic is tested fast in test_vocab.py.
pytestmark = pytest.mark.slow

UNION = {
    "merge_method": "task_arithmetic",
    "parameters": {"weight": 0.5},
    "dtype": "bfloat16",
    "tokenizer_source": "union",
    "chat_template": "chatml",
}
BLOCK = {
    "merge_method": "linear",
    "dtype": "bfloat16",
    "tokenizer": {
        "source": "union",
        "pad_to_multiple_of": 16,
        "tokens": {
            "<x1>": {"source": "B", "force": True},
            "<x2>": {"source": {"kind": "zero"}},
            "ab": {"source": "B", "force": True},
            "<new>": {"source": {"kind": "model_token", "model": "B", "token": "cd"}},
        },
    },
}
# name: (config, tied embeddings, whether the base is only base_model (else also among models)).
# The base is always named: without one, mergekit takes the vocabulary's starting tokenizer from
# a set's first model, which varies from run to run.
BASE = {
    "merge_method": "task_arithmetic",
    "dtype": "bfloat16",
    "tokenizer": {"source": "base", "pad_to_multiple_of": 12},
}
MODEL = {"merge_method": "task_arithmetic", "dtype": "bfloat16", "tokenizer_source": "B", "chat_template": "auto"}
CASES = {
    "union-untied": (UNION, False, True),
    "union-tied": (UNION, True, True),
    "block-untied": (BLOCK, False, False),
    "base-padded": (BASE, False, True),
    "model-source": (MODEL, True, True),
}


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """(a, b) per tying: b is a (other weights) with two added tokens and a special one."""
    root = tmp_path_factory.mktemp("tok-models")
    out = {}
    for tied in (False, True):
        a = write_llama(root / f"a-{tied}", 1, tied=tied)
        b = write_llama(root / f"b-{tied}", 2, added=["<x1>", "<x2>"], specials=["<|im_start|>"], tied=tied)
        out[tied] = (a, b)
    return root, out


def config_file(root: Path, case: str, pair: tuple[Path, Path]) -> Path:
    template, _, with_base = CASES[case]
    a, b = pair
    doc = json.loads(json.dumps(template).replace('"B"', json.dumps(str(b))))
    doc["base_model"] = str(a)
    if with_base:
        doc["models"] = [{"model": str(b), "parameters": {"weight": 0.5}}]
    else:
        doc["models"] = [
            {"model": str(a), "parameters": {"weight": 0.7}},
            {"model": str(b), "parameters": {"weight": 0.3}},
        ]
    path = root / f"{case}.yml"
    path.write_text(yaml.safe_dump(doc))
    return path


def mgit_merge(root: Path, case: str, pair: tuple[Path, Path], tag: str = "") -> tuple[Repository, str]:
    repo = Repository.init(root / f"repo-{case}{tag}")
    (repo.root / "README").write_text("models\n")
    repo.add(["README"])
    repo.commit("start")
    return repo, repo.merge([], None, config=config_file(root, case, pair), branch="merged")


def test_union_rows_follow_the_merged_vocabulary(models):
    root, pairs = models
    a, b = pairs[False]
    repo, commit = mgit_merge(root, "union-untied", pairs[False])
    out = repo.root / "model"
    merged, base, tuned = (load_file(p / "model.safetensors") for p in (out, a, b))
    for name in ("model.embed_tokens.weight", "lm_head.weight"):
        assert merged[name].shape == (35, 32)
        # rows of the base's tokens: base + 0.5 (b - base); the added tokens' rows: b's own (the base lacks them)
        expect = base[name].float() + 0.5 * (tuned[name][:32].float() - base[name].float())
        torch.testing.assert_close(merged[name][:32].float(), expect, rtol=1e-2, atol=1e-3)  # bf16 steps
        assert torch.equal(merged[name][32:], tuned[name][32:])
    vocab = json.loads((out / "tokenizer.json").read_text())
    assert [t["content"] for t in vocab["added_tokens"]][-3:] == ["<x1>", "<x2>", "<|im_start|>"]
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 35
    assert "<|im_start|>" in (out / "chat_template.jinja").read_text()
    tree = repo.graph.commit(commit).tree
    files = read_snapshot(repo.graph, tree)
    assert {"model/tokenizer.json", "model/tokenizer_config.json", "model/chat_template.jinja"} <= set(files)
    record = records.read_plan(repo.graph, tree)
    assert record is not None and record["tokenizer"]["vocab_size"] == 35
    assert record["tokenizer"]["rows_from"][str(a)] == [[0, 0, 32]]
    assert record["tokenizer"]["rows_from"][str(b)] == [[0, 0, 35]]
    assert [d["token"] for d in record["tokenizer"]["defaults"]] == ["<x1>", "<x2>", "<|im_start|>"]
    assert {d["source"]["model"] for d in record["tokenizer"]["defaults"]} == {str(b)}


def test_cli_config_merge_with_a_tokenizer(models, tmp_path):
    root, pairs = models
    path = config_file(root, "union-tied", pairs[True])
    repo = Repository.init(tmp_path / "cli")
    repo.close()
    invoke("merge", "--config", str(path), "-b", "merged", cwd=tmp_path / "cli", check=True)
    assert load_file(tmp_path / "cli" / "model" / "model.safetensors")["model.embed_tokens.weight"].shape == (35, 32)
    assert "lm_head.weight" not in load_file(tmp_path / "cli" / "model" / "model.safetensors")


def test_refused_with_one_line(models, tmp_path):
    root, pairs = models
    path = config_file(root, "union-untied", pairs[False])
    repo = Repository.init(tmp_path / "r")
    with pytest.raises(BadInputError, match="not with --budget"):
        repo.merge([], None, config=path, branch="m", budget="10%")
    doc = yaml.safe_load(path.read_text())
    for change, message in [
        ({"tokenizer": {"source": "union"}}, "either tokenizer_source or tokenizer"),
        ({"tokenizer_source": 3}, "tokenizer_source is union, base or a model"),
        ({"tokenizer_source": None, "tokenizer": {"tokens": {"x": {"source": {"kind": "odd"}}}}}, "kind is `zero`"),
        ({"tokenizer_source": None, "tokenizer": {"pad_to_multiple_of": 0}}, "positive integer"),
        ({"tokenizer_source": None, "tokenizer": {"padding": 8}}, "unknown key tokenizer.padding"),
        ({"tokenizer_source": "elsewhere"}, "union, base or one of the merged models"),
        ({"chat_template": "no-such-template"}, "neither a known template's name nor Jinja text"),
    ]:
        bad = tmp_path / "bad.yml"
        bad.write_text(yaml.safe_dump({k: v for k, v in (doc | change).items() if v is not None}))
        with pytest.raises(BadInputError, match=message):
            repo.merge([], None, config=bad, branch="m")
        assert "m" not in repo.branches()


@pytest.fixture(scope="module")
def both(models):
    """Per case: (mergekit's output directory, mgit's merged model directory)."""
    root, pairs = models
    out = {}
    for case, (_, tied, _) in CASES.items():
        path = config_file(root, case, pairs[tied])
        theirs = root / f"mergekit-{case}"
        # offline, as mgit always loads tokenizers: transformers writes the flag into tokenizer_config.json
        # (whether it is set otherwise depends on huggingface_hub's version: 2.5 detects offline hosts)
        offline = os.environ | {"HF_HUB_OFFLINE": "1"}
        subprocess.run(["mergekit-yaml", str(path), str(theirs)], check=True, capture_output=True, env=offline)
        repo, _ = mgit_merge(root, case, pairs[tied], "-against-mergekit")
        out[case] = (theirs, repo.root / "model")
    return out


# three mergekit-yaml runs (~5-20 s each)
@pytest.mark.parametrize("case", list(CASES))
def test_equal_to_mergekit(both, case):
    theirs, ours = both[case]
    mk, mg = load_file(theirs / "model.safetensors"), load_file(ours / "model.safetensors")
    assert sorted(mk) == sorted(mg)
    for name in mk:
        assert_matches(mg[name], mk[name], exact=True)
    tok_mk, tok_mg = (json.loads((d / "tokenizer.json").read_text()) for d in (theirs, ours))
    assert tok_mg["model"]["vocab"] == tok_mk["model"]["vocab"]
    assert tok_mg["added_tokens"] == tok_mk["added_tokens"]
    for name in ("tokenizer_config.json", "chat_template.jinja"):
        assert (ours / name).exists() == (theirs / name).exists()
        if (theirs / name).exists():
            assert (ours / name).read_bytes() == (theirs / name).read_bytes()
    cfg_mk, cfg_mg = (json.loads((d / "config.json").read_text()) for d in (theirs, ours))
    assert cfg_mg["vocab_size"] == cfg_mk["vocab_size"]


@pytest.mark.parametrize("case", list(CASES))
def test_transformers_gives_mergekits_logits(both, case):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    theirs, ours = both[case]
    ids = torch.tensor([[1, 3, 29, 32, 33, 34]])
    logits = [AutoModelForCausalLM.from_pretrained(d).eval()(ids).logits for d in (theirs, ours)]
    assert torch.equal(logits[0], logits[1])
    assert AutoTokenizer.from_pretrained(ours).get_vocab() == AutoTokenizer.from_pretrained(theirs).get_vocab()


def test_merge_of_revisions_on_head_writes_the_tokenizer(models, tmp_path):
    """Revisions of one repository, merged on the checked-out branch: the working tree gets the
    merged model, tokenizer files and config.json, and is clean; removed tokenizer files go."""
    root, pairs = models
    a, b = pairs[False]
    repo = Repository.init(tmp_path / "r")
    shutil.copytree(a, repo.root / "model")
    (repo.root / "model" / "vocab.txt").write_text("an old tokenizer file\n")
    repo.add(["model"])
    repo.commit("base")
    repo.checkout(create_branch="chat")
    shutil.rmtree(repo.root / "model")
    shutil.copytree(b, repo.root / "model")
    repo.add(["model"])
    repo.commit("chat")
    repo.checkout("main")
    path = tmp_path / "m.yml"
    path.write_text(yaml.safe_dump(UNION | {"base_model": "main", "models": [{"model": "chat"}]}))
    repo.merge([], None, config=path)
    out = repo.root / "model"
    assert load_file(out / "model.safetensors")["lm_head.weight"].shape == (35, 32)
    assert json.loads((out / "config.json").read_text())["vocab_size"] == 35
    assert (out / "chat_template.jinja").exists() and not (out / "vocab.txt").exists()
    assert repo.status().clean
