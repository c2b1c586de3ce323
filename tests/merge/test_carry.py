"""A merge's work follows its plan: output chunks no chosen expert chunk changes are the base's,
carried into the merged manifest without being read, computed or stored; `--no-checkout` leaves
the working tree alone."""

from __future__ import annotations

import json

import pytest
import torch
from helpers.cli import invoke
from helpers.models import THREE_EXPERTS, THREE_WEIGHTS, commit_model, llama_state_dict, tree_hashes

import mgit.merge.carry as carry
from mgit.merge.carry import carried_chunks
from mgit.merge.methods.affine_arrays import AffineKernel
from mgit.merge.methods.registry import get_method
from mgit.merge.methods.task_arithmetic import TaskArithmetic
from mgit.store.chunkstore import ChunkStore

NAMES, WEIGHTS = THREE_EXPERTS, THREE_WEIGHTS


@pytest.fixture
def spy(monkeypatch):
    """Every chunk id the store is asked to read, and every chunk it is asked to store."""
    reads: list[str] = []
    writes: list[str] = []
    real_get, real_put = ChunkStore.get, ChunkStore.put

    def get(self, cid, *args, **kwargs):
        reads.append(cid)
        return real_get(self, cid, *args, **kwargs)

    def put(self, raw, group, cid=None, *args, **kwargs):
        writes.append(cid)
        return real_put(self, raw, group, cid, *args, **kwargs)

    monkeypatch.setattr(ChunkStore, "get", get)
    monkeypatch.setattr(ChunkStore, "put", put)
    return reads, writes


def _model_entries(repo, rev):
    return {p: e for p, e in repo.snapshot(rev).items() if p.startswith("model/")}


def _old_way(monkeypatch):
    """Execute every chunk, as mgit did before carrying: the method claims nothing."""
    monkeypatch.setattr(TaskArithmetic, "keeps_base_where_unchanged", lambda self, params: False)


@pytest.mark.parametrize("checkout", [True, False])
def test_a_budgeted_merge_reads_and_stores_nothing_where_no_expert_chunk_was_chosen(three_uneven, spy, checkout):
    repo = three_uneven
    plan, setup = repo.merge_plan(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    carried = {tp.name: carried_chunks(tp, setup) for tp in plan.tensors}
    total = sum(len(tp.base.chunks) for tp in plan.tensors)
    n_carried = sum(len(c) for c in carried.values())
    assert 0 < n_carried < total  # the budget chose some chunks, and left most
    carried_ids = {tp.base.chunks[i].id for tp in plan.tensors for i in carried[tp.name]}
    computed_ids = {c.id for tp in plan.tensors for i, c in enumerate(tp.base.chunks) if i not in carried[tp.name]}
    only_carried = carried_ids - computed_ids  # a chunk id can appear at both kinds of places

    reads, writes = spy
    reads.clear(), writes.clear()
    sha = repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, branch="m", checkout=checkout)
    assert not only_carried & set(reads)  # the working tree supplied what a checkout wrote
    record = repo.merge_record(sha)
    b = record["bytes"]
    assert (b["output_chunks_carried"], b["output_chunks_computed"]) == (n_carried, total - n_carried)
    assert len([w for w in writes if w in carried_ids]) == 0  # nothing of the base stored again
    assert b["base_measured"] < plan.base_bytes * (total - n_carried) / total * 1.5 + 1


def test_carrying_is_bit_identical_to_computing_every_chunk(three_uneven, monkeypatch):
    repo = three_uneven
    for budget, branch in ((None, "exact"), ("10%", "budgeted")):
        repo.checkout("main")
        repo.merge(list(NAMES), "task_arithmetic", budget=budget, weight=WEIGHTS, branch=branch)
    with monkeypatch.context() as m:
        _old_way(m)
        for budget, branch in ((None, "exact-old"), ("10%", "budgeted-old")):
            repo.checkout("main")
            repo.merge(list(NAMES), "task_arithmetic", budget=budget, weight=WEIGHTS, branch=branch)
    assert _model_entries(repo, "exact") == _model_entries(repo, "exact-old")
    assert _model_entries(repo, "budgeted") == _model_entries(repo, "budgeted-old")
    old = repo.merge_record("budgeted-old")["bytes"]
    new = repo.merge_record("budgeted")["bytes"]
    assert old["output_chunks_carried"] < new["output_chunks_carried"]
    assert new["base_measured"] < old["base_measured"]


@pytest.mark.parametrize("method", ["ties", "dare_ties"])
def test_sparsifiers_carry_unchanged_chunks_bit_identically(three_uneven, monkeypatch, method):
    repo = three_uneven
    params = {"weight": WEIGHTS, "density": 0.5, "seed": 7}
    repo.merge(list(NAMES), method, branch="new", budget="20%", **params)
    with monkeypatch.context() as m:
        _old_way(m)
        repo.checkout("main")
        repo.merge(list(NAMES), method, branch="old", budget="20%", **params)
    assert _model_entries(repo, "new") == _model_entries(repo, "old")
    assert repo.merge_record("new")["bytes"]["output_chunks_carried"] > 0


def test_frozen_tensors_keep_the_bases_manifest(three_uneven):
    repo = three_uneven
    sha = repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, branch="m")
    record = repo.merge_record(sha)
    untouched = [t for t in record["tensors"] if not any(t["expert_chunks_read"])]
    assert untouched  # a third of each fine-tune is frozen; some tensors are frozen in all
    assert record["bytes"]["output_chunks_carried"] >= sum(t["chunks"] for t in untouched)


def test_a_working_dtype_that_rounds_the_base_computes_every_chunk(three_uneven):
    repo = three_uneven
    plan, setup = repo.merge_plan(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, dtype="F16")
    assert all(not carried_chunks(tp, setup) for tp in plan.tensors)  # bf16 → f16 → bf16 is not exact
    plan, setup = repo.merge_plan(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, dtype="F32")
    assert all(not carried_chunks(tp, setup) for tp in plan.tensors)  # the result is F32: nothing is the base's
    plan, setup = repo.merge_plan(
        list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, dtype="F32", out_dtype="BF16"
    )
    assert any(carried_chunks(tp, setup) for tp in plan.tensors)  # bf16 → f32 → bf16 is exact
    plan, setup = repo.merge_plan(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, out_dtype="F32")
    assert all(not carried_chunks(tp, setup) for tp in plan.tensors)


def test_linear_claims_nothing():
    linear = get_method("linear")
    assert not linear.keeps_base_where_unchanged(linear.resolve({"weight": [0.3, 0.7]}, 2))


# -- --no-checkout -----------------------------------------------------------------------------


def _state(repo):
    return (
        tree_hashes(repo.root),
        {p.name: p.stat().st_mtime_ns for p in (repo.root / "model").iterdir()},
        (repo.git_dir / "mgit-index.json").read_bytes(),
        repo.refs.head(),
        repo.refs.current_branch(),
    )


def test_no_checkout_leaves_working_tree_index_and_head_alone(three_uneven):
    repo = three_uneven
    before = _state(repo)
    sha = repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, branch="cand", checkout=False)
    assert _state(repo) == before
    assert repo.refs.branches()["cand"] == sha
    repo.checkout("cand")  # what it made is a normal commit: check it out, it is the merge
    assert repo.status().clean
    repo.checkout("main")
    again = repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, branch="checked")
    assert _model_entries(repo, again) == _model_entries(repo, sha)


def test_no_checkout_works_with_a_dirty_working_tree(three_uneven):
    repo = three_uneven
    (repo.root / "notes.txt").write_text("work in progress\n")
    repo.add(["notes.txt"])
    (repo.root / "notes.txt").write_text("more\n")
    repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, branch="cand", checkout=False)
    assert (repo.root / "notes.txt").read_text() == "more\n"


def test_no_checkout_cli(three_uneven):
    repo = three_uneven
    args = ("merge", *NAMES, "--method", "task_arithmetic", "--weights", "0.5,0.3,0.2")
    refused = invoke(*args, "--no-checkout", cwd=repo.root)
    assert refused.returncode == 2 and "-b NAME" in refused.stderr
    done = invoke(*args, "--budget", "10%", "-b", "cand", "--no-checkout", "--json", cwd=repo.root)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    assert (doc["branch"], doc["checked_out"]) == ("cand", False)
    assert doc["bytes"]["output_chunks_carried"] > 0
    assert repo.refs.current_branch() == "main"
    text = invoke(*args, "-b", "c2", "--no-checkout", cwd=repo.root)
    assert "on c2 (not checked out)" in text.stdout and "carried from the base" in text.stdout


def test_a_checked_out_budgeted_merge_matches_a_fresh_checkout(three_uneven, tmp_path):
    repo = three_uneven
    repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, budget="10%")
    written = tree_hashes(repo.root, "model")
    for f in (repo.root / "model").iterdir():
        f.unlink()
    repo.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root, "model") == written
    assert repo.status().clean


def test_a_budgeted_sparsifier_reads_only_the_base_chunks_it_computes(three_uneven):
    repo = three_uneven
    params = {"weight": WEIGHTS, "density": 0.5}
    exact = repo.merge_record(repo.merge(list(NAMES), "ties", branch="exact", **params))["bytes"]
    repo.checkout("main")
    budgeted = repo.merge_record(repo.merge(list(NAMES), "ties", branch="b", budget="10%", **params))["bytes"]
    assert budgeted["base_measured"] == budgeted["base_estimated"]
    assert budgeted["base_measured"] < exact["base_measured"] / 2


@pytest.mark.parametrize("streamed", [False, True])
def test_a_non_finite_base_value_under_unchanged_experts_is_still_seen_by_the_decision(
    repo, small_chunks, monkeypatch, streamed
):
    base = llama_state_dict(seed=3)
    name = "model.layers.0.mlp.down_proj.weight"
    base[name] = base[name].clone()
    base[name].view(-1)[0] = float("nan")  # in the first chunk, which no expert changes
    commit_model(repo, base, "base")
    for k, branch in enumerate(("a", "b")):
        repo.checkout("main")
        repo.checkout(create_branch=branch)
        tuned = {n: t.clone() for n, t in base.items()}
        flat = tuned[name].view(-1)
        half = flat.numel() // 2
        flat[half:] += (
            torch.randn(flat.numel() - half, generator=torch.Generator().manual_seed(k)).to(flat.dtype) * 0.01
        )
        commit_model(repo, tuned, branch)
    repo.checkout("main")
    plan, setup = repo.merge_plan(["a", "b"], "ties", weight=0.5, density=0.3)
    tp = next(t for t in plan.tensors if t.name == name)
    assert 0 in carried_chunks(tp, setup)
    with monkeypatch.context() as m:
        if streamed:  # deltas made chunk by chunk, as for embeddings: x - x is NaN there too
            m.setattr(carry, "STREAM_DELTAS_FROM", 0)
        repo.merge(["a", "b"], "ties", weight=0.5, density=0.3, branch="new")
    with monkeypatch.context() as m:
        _old_way(m)  # the base held whole, every chunk computed
        repo.checkout("main")
        repo.merge(["a", "b"], "ties", weight=0.5, density=0.3, branch="old")
    new, old = (repo.state_dict(rev)[name].view(torch.int16).view(-1) for rev in ("new", "old"))
    assert new[0] == base[name].view(torch.int16).view(-1)[0]  # the base's NaN, carried as it is
    assert torch.isnan(repo.state_dict("old")[name].view(-1)[0])  # computed: a NaN too
    assert torch.equal(new[1:], old[1:])  # and every other element as computing it gives


def test_experts_equal_to_the_base_at_a_chunk_are_left_out_of_its_math(three_uneven, monkeypatch):
    repo = three_uneven
    seen: list[int] = []
    real, real_array = TaskArithmetic.combine_slice, AffineKernel.merge

    def counting(self, base, experts, *args, **kwargs):
        seen.append(len(experts))
        return real(self, base, experts, *args, **kwargs)

    def counting_array(self, base, experts, *args, **kwargs):
        seen.append(len(experts))
        return real_array(self, base, experts, *args, **kwargs)

    monkeypatch.setattr(TaskArithmetic, "combine_slice", counting)  # the torch kernel
    monkeypatch.setattr(AffineKernel, "merge", counting_array)  # and the array kernel (bf16 / fp16)
    repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS, branch="m")
    assert seen and min(seen) < len(NAMES)  # a third of each fine-tune's tensors are frozen
    monkeypatch.undo()
    merged = repo.state_dict("m")
    sds = [repo.state_dict(n) for n in NAMES]
    base = repo.state_dict("main")
    method = get_method("task_arithmetic")
    for name in ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight"):
        whole = method(base[name], [sd[name] for sd in sds], {"weight": WEIGHTS})
        assert torch.equal(whole.view(torch.int16), merged[name].view(torch.int16))


def test_a_merge_asks_the_kernel_for_exactly_its_planned_chunks(three_uneven, monkeypatch):
    repo = three_uneven
    plan, setup = repo.merge_plan(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    planned = {tp.experts[k].chunks[i].id for tp in plan.tensors for k, r in enumerate(tp.reads) for i in r}
    computed = {c.id for tp in plan.tensors for i, c in enumerate(tp.base.chunks) if i not in carried_chunks(tp, setup)}
    asked: list[str] = []
    monkeypatch.setattr(ChunkStore, "prefetch", lambda self, cids: asked.extend(cids))
    repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, branch="m", checkout=False)
    assert set(asked) == planned | computed
