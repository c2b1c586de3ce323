"""Merges as commits: equal to mergekit on whole models, streaming, recorded, transactional."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch
from helpers.cli import invoke
from helpers.models import frozen_finetune, llama_state_dict, touch_later, tree_hashes, write_model
from helpers.run import run_mgit
from mergekit.merge_methods.api import merge_state_dicts

from mgit.errors import BadInputError, DirtyWorktreeError


@pytest.fixture
def experts(repo):
    """A base on main and three fine-tunes on branches, each with different frozen layers."""
    base = llama_state_dict()
    write_model(repo.root / "model", base)
    repo.add(["model"])
    repo.commit("base")
    tuned = {}
    for i, name in enumerate(("math", "code", "chat")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        sd = frozen_finetune(base, frozen_layers={i, (i + 1) % 4}, seed=20 + i)
        write_model(repo.root / "model", sd)
        touch_later(repo.root / "model" / "model.safetensors")
        repo.add(["model"])
        repo.commit(name)
        tuned[name] = sd
    repo.checkout("main")
    return repo, base, tuned


def reference(method, base, tuned, names, params, base_included=True):
    models = ({"base": base} if base_included else {}) | {n: tuned[n] for n in names}
    return merge_state_dicts(models, method, base="base" if base_included else None, parameters=params)


@pytest.mark.parametrize(
    ("method", "params", "mk_params"),
    [
        (
            "task_arithmetic",
            {"weight": [0.5, 0.3, 0.2], "lambda": 1.0},
            {"weight": {"math": 0.5, "code": 0.3, "chat": 0.2}},
        ),
        (
            "ties",
            {"weight": [0.5, 0.3, 0.2], "density": 0.5},
            {"weight": {"math": 0.5, "code": 0.3, "chat": 0.2}, "density": 0.5},
        ),
        ("breadcrumbs", {"weight": 1.0, "density": 0.6, "gamma": 0.05}, {"weight": 1.0, "density": 0.6, "gamma": 0.05}),
    ],
)
def test_merge_equals_mergekit_bit_for_bit(experts, method, params, mk_params):
    repo, base, tuned = experts
    names = ["math", "code", "chat"]
    commit = repo.merge(names, method, **params)
    want = reference(method, base, tuned, names, mk_params)
    got = repo.state_dict(commit)
    assert set(got) == set(want)
    assert all(torch.equal(got[k], want[k]) for k in want), method
    assert repo.graph.commit(commit).parents == (repo.resolve("HEAD~1"), *[repo.resolve(n) for n in names])


@pytest.mark.parametrize(
    ("method", "names", "params"),
    [
        ("breadcrumbs_ties", ["math", "code"], {"weight": 0.5, "density": 0.6, "gamma": 0.05}),
        ("slerp", ["math"], {"t": 0.3}),
        ("model_stock", ["math", "code", "chat"], {}),
        ("task_arithmetic", ["math", "code"], {"weight": 0.5, "lambda": 0.8, "normalize": True}),
    ],
)
def test_more_methods_equal_mergekit_on_whole_models(experts, method, names, params):
    repo, base, tuned = experts
    commit = repo.merge(names, method, base="main", branch=f"m-{method}", **params)
    want = reference(method, base, tuned, names, params)
    got = repo.state_dict(commit)
    assert all(torch.equal(got[k], want[k]) for k in want), method


def test_fp32_models_merge_equal_to_mergekit(repo):
    base = llama_state_dict(dtype=torch.float32)
    write_model(repo.root / "model", base)
    repo.add(["model"])
    repo.commit("fp32 base")
    repo.checkout(create_branch="e1")
    e1 = frozen_finetune(base, {0}, seed=3)
    write_model(repo.root / "model", e1)
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("e1")
    repo.checkout("main")
    commit = repo.merge(["e1"], "ties", weight=1.0, density=0.4)
    want = merge_state_dicts({"base": base, "e1": e1}, "ties", base="base", parameters={"weight": 1.0, "density": 0.4})
    got = repo.state_dict(commit)
    for k in want:
        assert (got[k] - want[k]).abs().max().item() <= 1e-6 * (want[k].abs().max().item() or 1.0), k


def test_linear_merges_the_experts(experts):
    repo, base, tuned = experts
    commit = repo.merge(["math", "code"], "linear", weight=[0.7, 0.3])
    want = merge_state_dicts(
        {"math": tuned["math"], "code": tuned["code"]}, "linear", parameters={"weight": [0.7, 0.3]}
    )
    got = repo.state_dict(commit)
    assert all(torch.equal(got[k], want[k]) for k in want)


def test_dry_run_reads_nothing_and_merge_reads_only_differing_chunks(experts):
    repo, base, tuned = experts
    before = repo.store.reads.chunks
    plan, _ = repo.merge_plan(["math", "code"], "task_arithmetic", weight=0.5)
    assert repo.store.reads.chunks == before
    differing = sum(
        1 for n in ("math", "code") for k in base if not torch.equal(base[k], tuned[n][k])
    )  # one chunk per small tensor
    assert plan.expert_chunks == differing < 2 * len(base)
    commit = repo.merge(["math", "code"], "task_arithmetic", weight=0.5)
    record = repo.merge_record(commit)
    assert record["bytes"]["expert_chunks_measured"] == differing
    assert record["bytes"]["experts_measured"] == record["bytes"]["experts_estimated"]
    untouched = [t for t in record["tensors"] if not any(t["expert_chunks_read"])]
    assert untouched and all(t["decision"] == "merged" for t in record["tensors"])


def test_head_advances_and_working_tree_holds_the_merge(experts):
    repo, base, tuned = experts
    commit = repo.merge(["math", "code"], "ties", weight=[0.5, 0.5], density=0.5, message="merge v1")
    assert repo.refs.current_branch() == "main" and repo.refs.head() == commit
    assert repo.status().clean
    from safetensors.torch import load_file

    on_disk = load_file(repo.root / "model" / "model.safetensors")
    stored = repo.state_dict(commit)
    assert all(torch.equal(on_disk[k], stored[k]) for k in stored)
    files = tree_hashes(repo.root)
    repo.checkout("math")
    repo.checkout("main")
    assert tree_hashes(repo.root) == files


def test_other_base_needs_a_new_branch(experts):
    repo, base, tuned = experts
    repo.checkout("chat")
    with pytest.raises(BadInputError, match="-b NAME"):
        repo.merge(["math", "code"], "task_arithmetic", base="main", weight=0.5)
    commit = repo.merge(["math", "code"], "task_arithmetic", base="main", weight=0.5, branch="merged")
    assert repo.refs.current_branch() == "merged" and repo.branches()["merged"] == commit
    assert repo.branches()["chat"] == repo.resolve("chat")
    assert repo.graph.commit(commit).parents[0] == repo.resolve("main")
    assert repo.status().clean


def test_seed_makes_random_merges_reproducible(experts):
    repo, base, tuned = experts
    a = repo.merge(["math", "code"], "dare_ties", base="main", weight=0.5, density=0.5, seed=7, branch="a")
    b = repo.merge(["math", "code"], "dare_ties", base="main", weight=0.5, density=0.5, seed=7, branch="b")
    c = repo.merge(["math", "code"], "dare_ties", base="main", weight=0.5, density=0.5, seed=8, branch="c")
    tree = lambda sha: repo.graph.commit(sha).tree  # noqa: E731
    assert tree(a) == tree(b) != tree(c)
    assert repo.merge_record(a)["seed"] == 7


def test_errors(experts):
    repo, base, tuned = experts
    with pytest.raises(BadInputError, match="unknown merge method"):
        repo.merge(["math"], "nope")
    with pytest.raises(BadInputError, match="values of weight"):
        repo.merge(["math", "code"], "task_arithmetic", weight=[1, 2, 3])
    with pytest.raises(BadInputError, match="unknown parameter"):
        repo.merge(["math"], "task_arithmetic", weight=1, sharpness=2)
    with pytest.raises(Exception, match="unknown revision"):
        repo.merge(["ghost"], "task_arithmetic", weight=1)
    (repo.root / "model" / "config.json").write_text("{}")
    with pytest.raises(DirtyWorktreeError):
        repo.merge(["math"], "task_arithmetic", weight=1)


def test_shape_mismatch_is_refused(repo):
    write_model(repo.root / "model", {"w": torch.zeros(4, 4)})
    repo.add(["model"])
    repo.commit("base")
    repo.checkout(create_branch="wide")
    write_model(repo.root / "model", {"w": torch.zeros(4, 5)})
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("wide")
    repo.checkout("main")
    with pytest.raises(BadInputError, match="tensor 'w'"):
        repo.merge(["wide"], "task_arithmetic", weight=1)


KILL = """
import os, signal, sys
from mgit import Repository
from mgit.merge.chunk_buffers import ChunkBuffers
real = ChunkBuffers.get
count = [0]
def dying(self, slot, size):  # every merged chunk's result goes into buffer slot 1
    count[0] += slot == 1
    if count[0] == 10:
        os.kill(os.getpid(), signal.SIGKILL)
    return real(self, slot, size)
ChunkBuffers.get = dying
Repository(sys.argv[1]).merge(["math", "code"], "task_arithmetic", weight=0.5)
"""


def test_killed_merge_leaves_refs_and_tree_unchanged(experts):
    repo, base, tuned = experts
    head, files = repo.refs.head(), tree_hashes(repo.root)
    proc = subprocess.run([sys.executable, "-c", KILL, str(repo.root)], capture_output=True)
    assert proc.returncode == -9
    assert repo.refs.head() == head and tree_hashes(repo.root) == files and repo.status().clean
    repo.gc(grace_seconds=0)
    assert repo.fsck() == []
    a = repo.merge(["math", "code"], "task_arithmetic", weight=0.5, base="main", branch="x")
    b = repo.merge(["math", "code"], "task_arithmetic", weight=0.5, base="main", branch="y")
    assert repo.graph.commit(a).tree == repo.graph.commit(b).tree  # re-running gives the same tree


def test_cli_merge_dry_run_and_show(experts):
    repo, base, tuned = experts
    dry = run_mgit(
        *"merge math code --method ties --density 0.5 --weights 0.5,0.5 --dry-run --json".split(),
        cwd=repo.root,
        check=True,
    )
    plan = json.loads(dry.stdout)
    assert plan["schema"] == "mgit.plan/1" and plan["method"] == "ties" and "experts_measured" not in plan["bytes"]
    done = run_mgit(
        *"merge math code --method ties --density 0.5 --weights 0.5,0.5 -m".split(),
        "merge v1",
        "--seed",
        "3",
        cwd=repo.root,
        check=True,
    )
    assert "merged 2 expert(s) with ties" in done.stdout
    shown = run_mgit("show", cwd=repo.root, check=True).stdout
    assert "merge: ties" in shown and "seed 3" in shown and "math" in shown
    doc = json.loads(run_mgit("show", "--json", cwd=repo.root, check=True).stdout)
    assert doc["plan"]["parameters"]["density"] == [0.5, 0.5] and len(doc["parents"]) == 3
    bad = run_mgit("merge", "math", "--method", "ties", "--weights", "x", cwd=repo.root)
    assert bad.returncode == 2 and "not a number" in bad.stderr


def test_lineage_and_log_graph(experts):
    repo, base, tuned = experts
    merged = repo.merge(["math", "code"], "task_arithmetic", weight=[0.6, 0.4], message="merge [v1]")
    tree = repo.lineage(merged)
    assert tree["method"] == "task_arithmetic"
    roles = [n["role"] for n in tree["inputs"]]
    assert roles == ["base", "expert math (weight 0.6)", "expert code (weight 0.4)"]
    assert tree["inputs"][1]["inputs"][0]["seen"]  # math's parent is the base, already shown
    text = invoke("lineage", cwd=repo.root, check=True).stdout
    assert "merge: task_arithmetic" in text and "expert code (weight 0.4)" in text
    doc = json.loads(invoke("lineage", "--json", cwd=repo.root, check=True).stdout)
    assert doc["schema"] == "mgit.lineage/1" and doc["root"]["commit"] == merged
    graph = invoke("log", "--graph", "--oneline", cwd=repo.root, check=True).stdout
    assert "merge [v1]" in graph and "| + math" in graph and "× 0.6" in graph


def test_real_minilm_with_synthetic_experts_equals_mergekit(repo):
    import shutil

    from helpers.models import minilm_dir
    from safetensors.torch import load_file, save_file

    shutil.copytree(minilm_dir(), repo.root / "model")
    repo.add(["model"])
    repo.commit("all-MiniLM-L6-v2")
    base = load_file(repo.root / "model" / "model.safetensors")
    tuned = {}
    for seed, (name, layer) in enumerate((("a", 0), ("b", 3))):
        g = torch.Generator().manual_seed(seed)
        sd = {
            k: v + torch.randn(v.shape, generator=g) * 0.01 if f"encoder.layer.{layer}." in k else v
            for k, v in base.items()
        }
        repo.checkout("main")
        repo.checkout(create_branch=name)
        save_file(sd, repo.root / "model" / "model.safetensors", metadata={"format": "pt"})
        touch_later(repo.root / "model" / "model.safetensors")
        repo.add(["model"])
        repo.commit(name)
        tuned[name] = sd
    repo.checkout("main")
    for method, params in (
        ("task_arithmetic", {"weight": [0.6, 0.4]}),
        ("ties", {"weight": [0.6, 0.4], "density": 0.3}),
    ):
        commit = repo.merge(["a", "b"], method, base="main", branch=f"m-{method}", **params)
        want = merge_state_dicts(
            {"base": base, "a": tuned["a"], "b": tuned["b"]},
            method,
            base="base",
            parameters={k: {"a": v[0], "b": v[1]} if isinstance(v, list) else v for k, v in params.items()},
        )
        got = repo.state_dict(commit)
        for k in want:
            scale = want[k].abs().max().item() or 1.0
            assert (got[k] - want[k]).abs().max().item() <= 1e-6 * scale, (method, k)
        repo.checkout("main")


def test_plan_survives_gc(experts):
    repo, base, tuned = experts
    commit = repo.merge(["math", "code"], "task_arithmetic", weight=0.5)
    repo.gc(grace_seconds=0)
    assert repo.merge_record(commit)["method"] == "task_arithmetic"
    assert repo.fsck() == []
