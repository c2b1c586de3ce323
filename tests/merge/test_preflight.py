"""A merge's pre-flight (mgit.merge.preflight): what failed at the first tensor mid-merge, and the
inputs' config.json, refused from manifests and configs alone, in one line naming the input; and
`mgit merge --check` / Repository.merge_check, which does only that and says what would be merged."""

from __future__ import annotations

import json

import pytest
import torch
import yaml
from helpers.cli import invoke
from helpers.models import frozen_finetune, llama_state_dict, touch_later, write_model

from mgit import Repository
from mgit.errors import BadInputError

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 256}


def _commit(repo: Repository, sd: dict, message: str, config: dict) -> str:
    write_model(repo.root / "model", sd, config=config)
    for f in (repo.root / "model").iterdir():
        touch_later(f)
    repo.add(["model"])
    return repo.commit(message)


@pytest.fixture(scope="module")
def inputs(tmp_path_factory):
    """main: a base with a token-id tensor; branches: fine-tunes (math, code), one whose config
    names another architecture (crime), one with another vocab_size (vocab), one whose token ids
    differ (ids). Only planned and checked here: nothing in it changes."""
    repo = Repository.init(tmp_path_factory.mktemp("preflight") / "work")
    base = llama_state_dict(seed=3) | {"model.position_ids": torch.arange(8)}
    _commit(repo, base, "base", LLAMA)
    branches = {
        "math": (frozen_finetune(base, {0}, seed=30), LLAMA),
        "code": (frozen_finetune(base, {1}, seed=31), LLAMA),
        "crime": (frozen_finetune(base, {1}, seed=32), LLAMA | {"architectures": ["MistralForCausalLM"]}),
        "vocab": (frozen_finetune(base, {1}, seed=33), LLAMA | {"vocab_size": 300}),
        "ids": (base | {"model.position_ids": torch.arange(8) + 1}, LLAMA),
    }
    for name, (sd, config) in branches.items():
        repo.checkout("main")
        repo.checkout(create_branch=name)
        _commit(repo, sd, name, config)
    repo.checkout("main")
    yield repo
    repo.close()


# -- what failed only at the first tensor --------------------------------------------------------

REFUSED = [
    (("math", "code"), "slerp", {"t": 0.5}, "slerp merges exactly 1 expert(s) besides the base; 2 given: math, code"),
    (("math",), "nuslerp", {"weight": 0.5}, "nuslerp merges exactly 2 expert(s) besides the base; 1 given: math"),
    (("math",), "model_stock", {}, "model_stock merges at least 2 expert(s) besides the base; 1 given: math"),
    (("math", "ids"), "linear", {"weight": 0.5}, "expert ids: tensor 'model.position_ids' (I64) differs"),
    (("math",), "linear", {"weight": 1.0, "dtype": "I32"}, "dtype 'I32' is not a floating-point dtype"),
    (("math",), "linear", {"weight": 1.0, "out_dtype": "bfloat16"}, "out_dtype 'bfloat16' is not a floating-point"),
]


@pytest.mark.parametrize(("experts", "method", "params", "message"), REFUSED)
def test_planning_refuses_what_the_first_tensor_would(inputs, experts, method, params, message):
    """Each of these planned fine before the pre-flight and failed mid-merge (an unknown dtype
    with an AttributeError's traceback)."""
    with pytest.raises(BadInputError) as info:
        inputs.merge_plan(list(experts), method, **params)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_architectures_must_agree_unless_crimes_are_allowed(inputs):
    with pytest.raises(
        BadInputError,
        match=r"expert crime: config.json architecture MistralForCausalLM \(llama\) "
        r"differs from the base HEAD's LlamaForCausalLM \(llama\); --allow-crimes",
    ):
        inputs.merge_check(["math", "crime"], "task_arithmetic", weight=0.5)
    checked = inputs.merge_check(["math", "crime"], "task_arithmetic", weight=0.5, allow_crimes=True)
    assert [i.name for i in checked.inputs] == ["HEAD", "math", "crime"]


def test_vocab_sizes_must_agree(inputs):
    with pytest.raises(
        BadInputError, match=r"expert vocab: config.json vocab_size 300 differs from the base HEAD's 256"
    ):
        inputs.merge_check(["vocab"], "task_arithmetic", weight=0.5, allow_crimes=True)


def test_the_reference_of_a_merge_without_a_base_is_compared(inputs):
    with pytest.raises(BadInputError, match=r"expert crime: .* differs from the reference math's"):
        inputs.merge_check(["math", "crime"], "linear", weight=0.5)


# -- mgit merge --check ------------------------------------------------------------------------------


def test_check_says_what_would_be_merged_and_writes_nothing(inputs):
    before = (inputs.resolve("HEAD"), sorted(inputs.graph.repo.refs.allkeys()))
    args = ("merge", "--method", "ties", "--weights", "0.5,0.3", "--density", "0.5", "math", "code", "--check")
    text = invoke(*args, cwd=inputs.root, check=True).stdout
    doc = json.loads(invoke(*args, "--json", cwd=inputs.root, check=True).stdout)
    assert (inputs.resolve("HEAD"), sorted(inputs.graph.repo.refs.allkeys())) == before
    assert doc["schema"] == "mgit.merge-check/1" and doc["ok"] and doc["method"] == "ties"
    roles = [(i["role"], i["name"], i["commit"]) for i in doc["inputs"]]
    assert roles == [
        ("base", "HEAD", inputs.resolve("HEAD")),
        ("expert", "math", inputs.resolve("math")),
        ("expert", "code", inputs.resolve("code")),
    ]
    assert [i["parameters"] for i in doc["inputs"][1:]] == [
        {"weight": 0.5, "density": 0.5},
        {"weight": 0.3, "density": 0.5},
    ]
    plan = inputs.merge_plan(["math", "code"], "ties", weight=[0.5, 0.3], density=0.5).plan
    assert doc["tensors"] == len(plan.tensors) and doc["bytes"] == {
        "base": plan.base_bytes,
        "experts": plan.expert_bytes,
    }
    assert text.startswith("check passed: ties of 2 expert(s)") and "math  weight=0.5, density=0.5" in text


def test_check_of_a_config_names_each_models_parameters(inputs, tmp_path):
    config = {
        "merge_method": "ties",
        "base_model": "main",
        "models": [
            {"model": "main"},
            {"model": "math", "parameters": {"weight": [1.0, 0.5], "density": 0.5}},
            {"model": "code", "parameters": {"weight": 0.5}},
        ],
        "parameters": {"density": 0.7, "normalize": True},
    }
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump(config))
    checked = inputs.merge_check([], None, config=path)
    assert [(i.role, i.name, i.parameters) for i in checked.inputs] == [
        ("base", "main", {}),
        ("expert", "math", {"density": 0.5, "weight": [1.0, 0.5]}),
        ("expert", "code", {"density": 0.7, "weight": 0.5}),
    ]
    assert checked.parameters == {"normalize": True} and checked.config == str(path)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("--method", "slerp", "--t", "0.5", "math", "code"), "slerp merges exactly 1 expert(s)"),
        (("--method", "linear", "--weights", "0.5", "math", "org/model"), "'org/model' looks like a Hugging Face"),
        (("--method", "task_arithmetic", "--weights", "0.5", "crime"), "expert crime: config.json architecture"),
    ],
)
def test_a_failed_check_is_one_line_exit_2(inputs, args, message):
    proc = invoke("merge", *args, "--check", cwd=inputs.root)
    assert proc.returncode == 2 and proc.stdout == "", (proc.stdout, proc.stderr)
    assert proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr


def test_a_hub_id_in_a_config_says_how_to_bring_the_model_in(inputs, tmp_path):
    path = tmp_path / "merge.yml"
    path.write_text(yaml.safe_dump({"merge_method": "linear", "models": [{"model": "meta-llama/Llama-3-8B@main"}]}))
    with pytest.raises(BadInputError, match=r"mgit downloads nothing; download it \(hf download meta-llama/Llama-3-8B"):
        inputs.merge_check([], None, config=path)


def test_a_mergekit_yaml_option_is_named_with_its_line(inputs):
    proc = invoke("merge", "--method", "linear", "math", "--out-shard-size", "1B", cwd=inputs.root)
    assert proc.returncode == 2 and "--out-shard-size (mergekit-yaml's): the merged model keeps" in proc.stderr
    proc = invoke("merge", "--method", "linear", "math", "--no-copy-tokenizer", cwd=inputs.root)
    assert proc.returncode == 2 and "keeps the base's tokenizer" in proc.stderr


def test_check_never_merges_a_branch(inputs):
    """`mgit merge REV --check` (no method) would be git's branch merge: refused, HEAD unmoved."""
    head = inputs.resolve("HEAD")
    proc = invoke("merge", "math", "--check", cwd=inputs.root)
    assert proc.returncode == 2 and "--check: an option of model merges" in proc.stderr, proc.stderr
    assert inputs.resolve("HEAD") == head
