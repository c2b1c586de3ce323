"""Low-rank sketches (issue 15): computed and stored beside a commit, read by budgeted merges
instead of exact chunks, never by checkout, diff or exact merges."""

from __future__ import annotations

import itertools
import os

import numpy as np
import pytest
import torch
from helpers.cli import invoke
from helpers.models import llama_state_dict
from helpers.sketches import SPEC, commit_experts, low_rank_finetune, push_experts
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.errors import BadInputError
from mgit.merge.budget.knapsack import Item, choose_options, options_bound
from mgit.merge.sketch import lowrank
from mgit.ops import sketch as sketch_ops

WEIGHTS = [0.5, 0.5]


@pytest.fixture
def experts(repo):
    """``commit_experts``, each expert sketched at 10%."""
    base = commit_experts(repo, 10)
    for name in ("e1", "e2"):
        repo.sketch(name, share="10%")
    return repo, base


def _energy_error(repo, rev: str, full: str) -> float:
    got, want = repo.state_dict(rev), repo.state_dict(full)
    return sum(float((got[n].double() - want[n].double()).square().sum()) for n in want)


# -- the math ---------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(80, 120), (120, 80), (400, 600)])  # exact (wide, tall), randomized
def test_a_prefix_of_a_sketch_is_a_direct_lower_rank_sketch(shape):
    m, n = shape
    g = np.random.default_rng(0)
    u = np.linalg.qr(g.standard_normal((m, 8)))[0]
    v = np.linalg.qr(g.standard_normal((n, 8)))[0]
    delta = ((u * np.array([64.0, 32, 16, 8, 4, 2, 1, 0.5])) @ v.T).astype(np.float32)
    a8, b8, sigma8 = lowrank.factorize(delta, 8, seed=1)
    a4, b4, sigma4 = lowrank.factorize(delta, 4, seed=2)
    prefix = lowrank.rows_of(a8[:4], b8[:4], 0, m)
    direct = lowrank.rows_of(a4, b4, 0, m)
    assert np.allclose(prefix, direct, atol=1e-4)
    assert sigma8[:4] == pytest.approx(sigma4, rel=1e-4)
    assert np.allclose(lowrank.rows_of(a8, b8, 0, m), delta, atol=1e-4)
    # a chunk's elements come from the rows it covers only (BLAS may block a product of fewer
    # rows differently: equal to float32's rounding, not bit for bit)
    whole = lowrank.rows_of(a8, b8, 0, m).reshape(-1)[130:517]
    assert np.allclose(lowrank.elements(a8, b8, 130, 517), whole, rtol=1e-5, atol=1e-6)
    # the residuals from one product are those of the reconstructions
    ends = lowrank.block_ends(8)
    want = [float(np.linalg.norm(delta.astype(np.float64) - lowrank.rows_of(a8[:r], b8[:r], 0, m))) for r in ends]
    assert lowrank.residuals(delta, a8, b8, ends) == pytest.approx(want, rel=1e-3, abs=1e-4)


def test_rank_blocks_and_the_rank_a_share_affords():
    assert lowrank.block_ends(0) == []
    assert lowrank.block_ends(1) == [1]
    assert lowrank.block_ends(12) == [1, 2, 4, 8, 12]
    assert lowrank.rank_for((64, 128), lowrank.stored_bound((64, 128), 5)) == 5
    assert lowrank.rank_for((64, 128), lowrank.stored_bound((64, 128), 5) - 1) == 4
    assert lowrank.rank_for((4, 4), 10**9) == 4
    assert lowrank.rank_for((64, 128), 100) == 0


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.tuples(st.integers(1, 30), st.floats(0, 50)), min_size=1, max_size=4), min_size=1, max_size=5),
    st.integers(0, 80),
)
def test_the_multiple_choice_knapsack_against_brute_force(groups, limit):
    items = [[Item(c, v) for c, v in g] for g in groups]
    picks = choose_options(items, limit)
    cost = sum(items[g][n].cost for g, n in enumerate(picks) if n >= 0)
    value = sum(items[g][n].value for g, n in enumerate(picks) if n >= 0)
    assert cost <= limit
    best = 0.0
    for combo in itertools.product(*[[-1, *range(len(g))] for g in items]):
        c = sum(items[g][n].cost for g, n in enumerate(combo) if n >= 0)
        if c <= limit:
            best = max(best, sum(items[g][n].value for g, n in enumerate(combo) if n >= 0))
    assert value <= best + 1e-9
    assert value >= best / 2 - 1e-9  # the proven factor
    assert options_bound(items, limit) >= best - 1e-6  # the LP bound bounds every choice


# -- storing ----------------------------------------------------------------------------------


def test_a_sketch_records_what_recomputing_it_gives(experts):
    repo, base = experts
    record = repo.sketch_record("e1")
    assert record is not None and record.kind == "lowrank" and record.share == 0.1
    assert record.parent == repo.resolve("main")
    assert record.stored_bytes <= 0.1 * record.expert_bytes  # within the share of the stored bytes
    mine = repo.state_dict("e1")
    tensors = {tp.name: tp.base for tp in repo.merge_plan(["e1"], "task_arithmetic", weight=1.0)[0].tensors}
    offers = sketch_ops.offers(repo.ctx, repo.resolve("e1"), tensors)
    assert {t.name for t in record.tensors} == set(offers)
    assert all(t.dim() == 2 for n, t in base.items() if n in offers)
    for ts in record.tensors:
        offer = offers[ts.name]
        rows = [np.concatenate([_read(repo, level[f]) for level in offer.blocks]) for f in (0, 1)]  # Aᵀ, Bᵀ
        delta = (mine[ts.name].double() - base[ts.name].double()).numpy()
        approx = lowrank.rows_of(rows[0], rows[1], 0, delta.shape[0]).astype(np.float64)
        assert float(np.square(delta).sum()) == pytest.approx(ts.energy, rel=1e-5)
        assert float(np.linalg.norm(delta - approx)) == pytest.approx(ts.residuals[-1], rel=1e-3, abs=1e-6)
        # what it keeps, measured, is what the singular values say (the factors are orthogonal)
        assert ts.captured(ts.rank) == pytest.approx(sum(x * x for x in ts.sigma), rel=0.02)
    assert record.captured_share > 0.8  # rank-4 changes: most tensors get rank ≥ 4 at 10%


def _read(repo, manifest) -> np.ndarray:
    import ml_dtypes  # the reference cast

    raw = b"".join(bytes(repo.store.get(c.id)) for c in manifest.chunks)
    assert manifest.dtype == "BF16"
    return np.frombuffer(raw, ml_dtypes.bfloat16).astype(np.float32).reshape(manifest.shape)


def test_an_expert_equal_to_its_parent_has_an_empty_sketch(experts):
    repo, _ = experts
    result = repo.sketch("e1", against="e1", force=True)
    assert result.created and result.record.tensors == [] and result.record.stored_bytes == 0


def test_sketching_again_is_a_no_op_and_a_different_sketch_needs_force(experts):
    repo, _ = experts
    again = repo.sketch("e1", share="10%")
    assert not again.created
    with pytest.raises(BadInputError, match="already has a sketch"):
        repo.sketch("e1", share="20%")
    assert repo.sketch("e1", share="20%", force=True).record.share == 0.2
    for bad in ("0%", "150%", "lots"):
        with pytest.raises(BadInputError, match="share"):
            repo.sketch("e2", share=bad, force=True)
    with pytest.raises(BadInputError, match="no parent"):
        repo.sketch("main")  # the first commit


def test_a_sketch_never_reaches_a_checkout_diff_or_exact_merge(experts):
    repo, _ = experts
    exact = repo.merge(["e1", "e2"], "task_arithmetic", branch="exact", checkout=False, weight=WEIGHTS)
    at_full = repo.merge(["e1", "e2"], "task_arithmetic", branch="all", checkout=False, weight=WEIGHTS, budget="100%")
    exact_sd, full_sd = repo.state_dict("exact"), repo.state_dict("all")
    assert all(torch.equal(exact_sd[n], full_sd[n]) for n in exact_sd)  # 100%: sketches unused
    assert repo.merge_record(at_full)["budget"]["sketches"]["used"] == 0
    assert "budget" not in repo.merge_record(exact)
    repo.checkout("e1")
    before = (repo.root / "model/model.safetensors").read_bytes()
    diff_before = repo.diff("main", "e1")
    repo.sketch("e1", share="50%", force=True)  # a new sketch, with other factors
    repo.checkout("main")
    repo.checkout("e1")
    assert (repo.root / "model/model.safetensors").read_bytes() == before
    assert repo.diff("main", "e1") == diff_before
    assert repo.status().clean
    assert all(".sketch." not in name for name in repo.state_dict("e1"))


def test_a_budgeted_merge_reads_sketches_and_keeps_more_within_the_budget(experts):
    repo, _ = experts
    repo.merge(["e1", "e2"], "task_arithmetic", branch="full", checkout=False, weight=WEIGHTS)
    errors, records = {}, {}
    for use in (True, False):
        sha = repo.merge(
            ["e1", "e2"],
            "task_arithmetic",
            branch=f"b{use}",
            checkout=False,
            budget="10%",
            budget_sketches=use,
            weight=WEIGHTS,
        )
        records[use] = repo.merge_record(sha)
        errors[use] = _energy_error(repo, f"b{use}", "full")
        b = records[use]["budget"]
        assert records[use]["bytes"]["experts_measured"] <= b["limit_bytes"]
        assert b["expert_bytes_planned"] <= b["limit_bytes"]
    with_sketches = records[True]["budget"]
    assert with_sketches["sketches"]["used"] > 0 and with_sketches["sketches"]["delta"] == "reconstructed"
    assert "sketches" not in records[False]["budget"]
    assert with_sketches["captured_share"] > 0.9 > records[False]["budget"]["captured_share"]
    assert errors[True] < 0.2 * errors[False]
    # the error bound bounds the measured error (affine: Σ |a| ‖Δ − Δ̂‖ + rounding)
    assert errors[True] ** 0.5 <= with_sketches["error_bound"] + with_sketches["rounding_allowance"]
    ranks = [t["budget"].get("sketch_ranks") for t in records[True]["tensors"] if "budget" in t]
    assert any(ranks)


def test_per_expert_fairness_with_sketches_holds_the_budget(experts):
    repo, _ = experts
    sha = repo.merge(
        ["e1", "e2"],
        "task_arithmetic",
        branch="fair",
        checkout=False,
        budget="5%",
        budget_fairness="per-expert",
        weight=WEIGHTS,
    )
    b = repo.merge_record(sha)["budget"]
    assert repo.merge_record(sha)["bytes"]["experts_measured"] <= b["limit_bytes"]
    assert min(b["captured_share_per_expert"]) > 0


def test_gc_keeps_a_sketch_and_fsck_finds_a_corrupted_sketch_chunk(experts):
    repo, _ = experts
    repo.gc()
    assert repo.fsck() == []
    tensors = {tp.name: tp.base for tp in repo.merge_plan(["e1"], "task_arithmetic", weight=1.0)[0].tensors}
    offer = next(iter(sketch_ops.offers(repo.ctx, repo.resolve("e1"), tensors).values()))
    loc = repo.store.location(offer.blocks[0][0].chunks[0].id)
    data = bytearray(loc.pack.read_bytes())
    data[loc.offset + loc.length // 2] ^= 0x5A
    os.chmod(loc.pack, 0o644)
    loc.pack.write_bytes(bytes(data))
    assert repo.fsck()


def test_the_cli_sketches_and_merges_with_sketches(experts):
    repo, _ = experts
    shown = invoke("sketch", "e2", "--share", "20%", "--force", cwd=repo.root, check=True)
    assert "sketched" in shown.stdout and "captured" in shown.stdout
    doc = invoke("sketch", "e2", "--share", "20%", "--json", cwd=repo.root, check=True)
    assert '"schema": "mgit.sketch-result/1"' in doc.stdout and '"created": false' in doc.stdout
    bad = invoke("sketch", "e2", "--share", "30%", cwd=repo.root)
    assert bad.returncode != 0 and "--force" in bad.stderr and "Traceback" not in bad.stderr
    merged = invoke(
        *"merge --method task_arithmetic --weights 0.5,0.5 e1 e2 --budget 10% -b m --no-checkout".split(),
        cwd=repo.root,
        check=True,
    )
    assert "read as sketches" in merged.stdout
    plain = invoke(
        *"merge --method task_arithmetic --weights 0.5,0.5 e1 e2 --budget 10% -b n --no-checkout".split(),
        *"--no-sketches".split(),
        cwd=repo.root,
        check=True,
    )
    assert "sketches" not in plain.stdout


def test_a_commit_can_sketch_itself(repo):
    from helpers.models import commit_model

    base = llama_state_dict(SPEC, seed=3, dtype=torch.float32)
    commit_model(repo, base, "base")
    repo.config_set("sketch.share", "10%")
    first = commit_model(repo, low_rank_finetune(base, 5), "tuned")  # commit_model: add + commit
    record = repo.sketch_record(first)
    assert record is not None and record.share == 0.1 and record.parent == repo.resolve("HEAD~1")
    with pytest.raises(BadInputError, match="share"):
        repo.commit("x", allow_empty=True, sketch="200%")
    assert repo.resolve("HEAD") == first  # nothing committed
    from helpers.models import write_model

    write_model(repo.root / "model", low_rank_finetune(base, 6))
    shown = invoke("add", "model", cwd=repo.root, check=True)
    shown = invoke("commit", "-m", "again", "--sketch", "20%", cwd=repo.root, check=True)
    assert shown.returncode == 0
    assert repo.sketch_record("HEAD").share == 0.2


def test_push_fetch_and_clones_carry_sketches_and_a_partial_clone_fetches_only_them(experts, tmp_path):
    from mgit import Repository

    repo, _ = experts
    remote = tmp_path / "remote"
    push_experts(repo, remote)
    sketch_ref = f"refs/mgit/sketches/{repo.resolve('e1')}"
    assert (remote / sketch_ref).is_file()  # pushed with the commit it sketches
    full = Repository.clone(str(remote), tmp_path / "full")
    assert full.sketch_record("origin/e1") == repo.sketch_record("e1")
    assert full.fsck() == []
    partial = Repository.clone(str(remote), tmp_path / "partial", partial=True)
    assert partial.sketch_record("origin/e1") is not None  # the record travels with the graph
    sha = partial.merge(
        ["origin/e1", "origin/e2"], "task_arithmetic", branch="m", checkout=False, budget="10%", weight=WEIGHTS
    )
    record = partial.merge_record(sha)
    assert record["budget"]["sketches"]["used"] > 0
    assert record["bytes"]["experts_fetched"] <= record["budget"]["limit_bytes"]
    assert record["budget"]["captured_share"] > 0.9
    # a sketch the clone lacks arrives with the next fetch; one it holds is kept
    repo.sketch("e2", share="20%", force=True)
    repo.push("origin", "e2")
    e2_ref = f"refs/mgit/sketches/{repo.resolve('e2')}".encode()
    del full.graph.repo.refs[e2_ref]
    full.fetch("origin")
    assert full.sketch_record("origin/e2").share == 0.2
    partial.fetch("origin")
    assert partial.sketch_record("origin/e2").share == 0.1


def test_a_budgeted_merge_can_sketch_the_experts_that_lack_one_first(repo):
    commit_experts(repo, 20)
    with pytest.raises(BadInputError, match="--budget"):
        repo.merge(["e1", "e2"], "task_arithmetic", branch="x", checkout=False, weight=WEIGHTS, sketch_missing="10%")
    with pytest.raises(BadInputError, match="dry-run"):
        repo.merge_plan(["e1", "e2"], "task_arithmetic", weight=WEIGHTS, budget="10%", sketch_missing="10%")
    assert repo.sketch_record("e1") is None  # refused before anything was written
    sha = repo.merge(
        ["e1", "e2"], "task_arithmetic", branch="m", checkout=False, weight=WEIGHTS, budget="10%", sketch_missing="10%"
    )
    b = repo.merge_record(sha)["budget"]
    assert b["sketches"]["computed"] == 2 and b["sketches"]["used"] > 0
    assert repo.sketch_record("e1").parent == repo.resolve("main")
    again = repo.merge(
        ["e1", "e2"], "task_arithmetic", branch="n", checkout=False, weight=WEIGHTS, budget="10%", sketch_missing="10%"
    )
    assert repo.merge_record(again)["budget"]["sketches"]["computed"] == 0  # once


def test_explain_and_dry_run_show_the_sketches_a_budget_reads(experts):
    repo, _ = experts
    args = ["merge", "--method", "task_arithmetic", "--weights", "0.5,0.5", "e1", "e2", "--budget", "10%"]
    explained = invoke(*args, "--explain", cwd=repo.root, check=True)
    assert "sketched" in explained.stdout and "read as sketches" in explained.stdout
    dry = invoke(*args, "--dry-run", cwd=repo.root, check=True)
    assert "sketch r" in dry.stdout
    plain = invoke(*args, "--explain", "--no-sketches", cwd=repo.root, check=True)
    assert "sketched" not in plain.stdout


def test_a_sketched_expert_is_the_base_where_its_chunks_equal_the_bases(repo, small_chunks):
    """The sketch stands for the chunks that differ only: elsewhere the delta is exactly 0 (what a
    sparsifier's whole-delta decision must see), though Δ̂ is not 0 there."""
    from mgit.merge.execution import Execution
    from mgit.merge.tensor_inputs import TensorInputs, chunk_starts

    base = llama_state_dict(SPEC, seed=3, dtype=torch.float32)
    repo.commit_state_dict(base, message="base")
    tuned = dict(base)
    g = torch.Generator().manual_seed(4)
    for name, t in base.items():
        if t.dim() == 2 and t.shape[0] >= 64:
            half = t.shape[0] // 2  # the bottom rows change: the randomized SVD's basis is not 0 on the top ones
            tuned[name] = t.clone()
            tuned[name][half:] += torch.randn(t.shape[0] - half, 4, generator=g) @ torch.randn(4, t.shape[1]) * 0.01
    repo.create_branch("half", "main")
    repo.commit_state_dict(tuned, message="half", branch="half")
    repo.sketch("half", share="25%")
    plan, _ = repo.merge_plan(["half"], "ties", weight=1.0, density=0.5, budget="20%")
    used = [tp for tp in plan.tensors if tp.sketch(0) is not None]
    assert used
    for tp in used:
        inputs = TensorInputs(tp, repo.store, repo.pool, Execution())
        base_t = inputs.read_base()
        got = inputs.expert(0, base_t).reshape(-1)
        flat, starts, size = base_t.reshape(-1), chunk_starts(tp.base), base_t.element_size()
        use = tp.sketch(0)
        assert len(use.chunks) < len(tp.base.chunks)
        for i in range(len(tp.base.chunks)):
            part = slice(starts[i] // size, starts[i + 1] // size)
            same = torch.equal(got[part], flat[part])
            assert same == (i not in use.chunks)


def test_gc_drops_the_sketch_of_a_commit_nothing_else_keeps(experts):
    repo, _ = experts
    e1, e2 = repo.resolve("e1"), repo.resolve("e2")
    repo.checkout("e1")
    repo.checkout("main")
    repo.delete_branch("e1", force=True)
    assert repo.gc(0).sketches_removed == 0  # HEAD's reflog still keeps e1's commit
    assert repo.sketch_record(e1) is not None
    repo.reflog_expire(None)
    report = repo.gc(0)
    assert report.sketches_removed == 1
    assert repo.sketch_record(e2) is not None
    assert f"refs/mgit/sketches/{e1}".encode() not in repo.graph.repo.refs.keys()
    assert repo.fsck() == []
    shown = invoke("gc", "--now", cwd=repo.root, check=True)
    assert "sketch" not in shown.stderr  # nothing left to drop
