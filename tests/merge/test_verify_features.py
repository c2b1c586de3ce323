"""`mgit merge --verify` of merges made with issue 41's features: a `slices:` merge recomputed
over each tensor's recorded sources (its config.json and shard index written again), a
tokenizer merge's rows aligned again from its inputs (not from the aligned chunks gc drops), a
merge of MODEL+LORA inputs read from their applied commits; a tampered one fails, and what
cannot be recomputed is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from helpers.cli import invoke
from helpers.models import LlamaSpec, llama_state_dict, write_model
from helpers.slice_configs import LAYERS, based, blended, frankenmerge, merged, modular, write_models

from mgit import Repository
from mgit.errors import NotRecomputableError
from mgit.graph import records
from mgit.graph.snapshot import Entry, write_snapshot


@pytest.fixture(scope="module")
def plain(tmp_path_factory) -> dict[str, Path]:
    return write_models(tmp_path_factory.mktemp("plain"), {"model_type": "llama", "num_hidden_layers": LAYERS})


def _tampered(repo: Repository, sha: str, change_record=None, files: dict[str, bytes] | None = None) -> str:
    """A commit like merge ``sha`` (same parents and records), with ``files`` (path → bytes)
    replacing its blobs and its plan record changed by ``change_record``."""
    graph, snap = repo.graph, dict(repo.snapshot(sha))
    for path, data in (files or {}).items():
        snap[path] = Entry("blob", graph.put_blob(data))
    doc = repo.merge_record(sha)
    if change_record is not None:
        change_record(doc)
    info = graph.commit(sha)
    extra = records.stats_entries(graph, records.read_stats(graph, info.tree)) + records.plan_entries(graph, doc)
    who = repo.ctx.identity()
    return graph.put_commit(write_snapshot(graph, snap, extra), list(info.parents), "tampered", who, who)


@pytest.mark.parametrize(
    "make", [frankenmerge, blended, based, modular], ids=["frankenmerge", "linear", "task-arithmetic", "modules"]
)
def test_a_slices_merge_verifies_bit_identical(started, plain, tmp_path, make):
    commit, ours, _ = merged(started, make(plain), tmp_path, "sliced")
    held = started.store.ids()
    result = started.verify_merge(commit)
    assert result.identical, result.differences[:3]
    assert result.tensors == len(ours) and result.chunks >= result.tensors
    assert started.store.ids() == held  # nothing stored
    shown = invoke("merge", "--verify", commit, cwd=started.root)
    assert shown.exit_code == 0 and "bit-identical" in shown.stdout


def test_a_tampered_slices_merge_fails(started, plain, tmp_path):
    commit, _, config = merged(started, blended(plain), tmp_path, "sliced")
    # another layer count in config.json: the file recomputed from the recorded config differs
    edited = json.dumps(config | {"num_hidden_layers": 7}).encode()
    result = started.verify_merge(_tampered(started, commit, files={"model/config.json": edited}))
    assert [(d.what, d.file) for d in result.differences] == [("file", "model/config.json")]

    # a tensor read from another source layer than the merge read: its chunks differ
    def other_layer(doc):
        entry = next(t for t in doc["tensors"] if t["name"] == "model.layers.1.mlp.up_proj.weight")
        entry["sources"]["experts"][0]["tensor"] = "model.layers.2.mlp.up_proj.weight"

    result = started.verify_merge(_tampered(started, commit, other_layer))
    assert [(d.what, d.tensor) for d in result.differences] == [("chunk", "model.layers.1.mlp.up_proj.weight")]

    def lost_source(doc):
        doc["tensors"][3]["sources"]["experts"][0]["tensor"] = "model.layers.99.mlp.up_proj.weight"

    with pytest.raises(NotRecomputableError, match="does not hold"):
        started.verify_merge(_tampered(started, commit, lost_source))
    shown = invoke("merge", "--verify", _tampered(started, commit, lost_source), cwd=started.root)
    assert shown.exit_code != 0 and shown.stderr.count("\n") == 1 and "does not hold" in shown.stderr


def _partial_clone(repo: Repository, branch: str, root: Path) -> Repository:
    repo.remote_add("origin", str(root / "remote.mgit"))
    repo.push("origin", branch)
    return Repository.clone(str(root / "remote.mgit"), root / "partial", partial=True)


def test_a_slices_merge_verifies_in_a_partial_clone(started, plain, tmp_path):
    commit, _, _ = merged(started, based(plain), tmp_path, "sliced")
    partial = _partial_clone(started, "sliced", tmp_path)
    result = partial.verify_merge(commit)
    assert result.identical and result.fetched_bytes > 0
    partial.close()


def test_a_slices_merge_that_drops_a_shard_verifies(started, tmp_path):
    """Only the donor's first layers: its shard of the last layers alone is dropped, in the
    recomputation too."""
    state = llama_state_dict(LlamaSpec(layers=LAYERS, hidden=32, intermediate=64, vocab=64), seed=4)
    late = [n for n in state if n.startswith(("model.layers.4.", "model.layers.5."))]
    ordered = {n: state[n] for n in [n for n in state if n not in late] + late}
    donor = tmp_path / "donor"
    write_model(donor, ordered, shards=4, config={"model_type": "llama", "num_hidden_layers": LAYERS})
    config = {"merge_method": "passthrough", "slices": [{"sources": [{"model": str(donor), "layer_range": [0, 2]}]}]}
    commit, _, _ = merged(started, config, tmp_path, "short")
    assert "model/model-00004-of-00004.safetensors" not in started.snapshot(commit)
    assert started.verify_merge(commit).identical


@pytest.mark.slow  # transformers builds the tokenizers (~10 s)
def test_a_tokenizer_merge_verifies_after_gc_drops_its_aligned_rows(tmp_path):
    from helpers.tiny_llama import write_llama

    a = write_llama(tmp_path / "a", 1)
    b = write_llama(tmp_path / "b", 2, added=["<x1>", "<x2>"], specials=["<|im_start|>"])
    config = {
        "merge_method": "task_arithmetic",
        "dtype": "bfloat16",
        "base_model": str(a),
        "models": [{"model": str(b), "parameters": {"weight": 0.5}}],
        "tokenizer_source": "union",
        "chat_template": "chatml",
    }
    repo = Repository.init(tmp_path / "repo")
    (repo.root / "README").write_text("models\n")
    repo.add(["README"])
    repo.commit("start")
    path = tmp_path / "union.yml"
    path.write_text(yaml.safe_dump(config))
    commit = repo.merge([], None, config=path, branch="merged")
    assert repo.merge_record(commit)["tokenizer"]["vocab_size"] == 35
    assert repo.gc(grace_seconds=0).chunks.removed_chunks > 0  # the aligned rows: no commit holds them
    held = repo.store.ids()
    result = repo.verify_merge(commit)
    assert result.identical, result.differences[:3]
    assert repo.store.ids() == held
    # the tokenizer files and config.json are compared too
    edited = (repo.root / "model" / "tokenizer_config.json").read_bytes() + b" "
    tampered = repo.verify_merge(_tampered(repo, commit, files={"model/tokenizer_config.json": edited}))
    assert [(d.what, d.file) for d in tampered.differences] == [("file", "model/tokenizer_config.json")]

    partial = _partial_clone(repo, "merged", tmp_path)  # the aligned rows are on no remote: made again here
    assert partial.verify_merge(commit).identical
    partial.close()

    def other_vocabulary(doc):
        doc["tokenizer"]["vocab_size"] = 36

    with pytest.raises(NotRecomputableError, match="vocabulary comes out otherwise than recorded"):
        repo.verify_merge(_tampered(repo, commit, other_vocabulary))
    repo.close()


def test_a_merge_of_lora_inputs_verifies_and_a_missing_applied_commit_is_named(tmp_path_factory, tmp_path):
    pytest.importorskip("peft")
    from helpers.lora_models import lora_inputs, lora_repo

    inputs = lora_inputs(tmp_path_factory.mktemp("lora"))
    repo = lora_repo(tmp_path / "repo", inputs)
    adapter = f"main+{inputs / 'bf16' / 'adapter-a'}"
    commit = repo.merge([adapter], "task_arithmetic", "main+adapters:lora/b", weight=0.5, branch="m", checkout=False)
    assert repo.verify_merge(commit).identical

    # a slice of an adapted model: its sources are the applied commit
    config = {
        "merge_method": "passthrough",
        "slices": [
            {"sources": [{"model": adapter, "layer_range": [0, 2]}]},
            {"sources": [{"model": "main", "layer_range": [1, 2]}]},
        ],
    }
    (tmp_path / "s.yml").write_text(yaml.safe_dump(config))
    sliced = repo.merge([], None, config=tmp_path / "s.yml", branch="s", checkout=False)
    assert repo.verify_merge(sliced).identical

    gone = "0" * 40

    def not_here(doc):
        doc["lora"][-1]["commit"] = doc["experts"][0]["commit"] = gone

    missing = _tampered(repo, commit, not_here)
    with pytest.raises(NotRecomputableError, match="LoRA adapter applied, commit 000000000000"):
        repo.verify_merge(missing)
    shown = invoke("merge", "--verify", missing, cwd=repo.root)
    assert shown.exit_code != 0 and shown.stderr.count("\n") == 1 and "fetch the merge commit's history" in shown.stderr
    repo.close()


def test_a_random_method_drawing_as_mergekit_verifies(experts):
    """``--rng mergekit``: the draws are made again in mergekit's order, from the recorded seed."""
    sha = experts.merge(
        ["math", "code"], "dare_ties", rng="mergekit", weight=0.5, density=0.4, branch="drawn", checkout=False
    )
    assert experts.merge_record(sha)["rng"] == "mergekit"
    assert experts.verify_merge(sha).identical

    def as_mgit(doc):
        doc["rng"] = "mgit"

    assert not experts.verify_merge(_tampered(experts, sha, as_mgit)).identical  # other draws
