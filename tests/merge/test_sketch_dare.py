"""DARE sketches (issue 15, ``--kind dare``): the values of a delta at seeded random positions,
in tiers a budget reads by prefix, the positions regenerated from the seed."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest
import torch
from helpers.cli import invoke
from helpers.sketches import commit_experts, push_experts
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.errors import BadInputError
from mgit.merge.sketch import dare
from mgit.model.stats import from_bf16_bits
from mgit.ops import sketch as sketch_ops

WEIGHTS = [0.5, 0.5]


def _bf16(x: np.ndarray) -> np.ndarray:
    return x.astype(ml_dtypes.bfloat16).astype(np.float32)  # the reference cast


def test_reading_a_prefix_of_the_tiers_is_the_sketch_at_that_keep_rate():
    g = np.random.default_rng(0)
    delta = g.standard_normal((300, 200)).astype(np.float32)
    rates = dare.rates_for(delta.size, 40_000)
    assert len(rates) >= 3 and rates[-1] <= dare.MAX_RATE
    assert all(b == pytest.approx(2 * a) for a, b in zip(rates, rates[1:], strict=False))
    cut = dare.split(delta, 7, rates)
    u = dare.uniforms(7, 0, delta.size)
    flat = delta.reshape(-1)
    for t, p in enumerate(rates):
        # tier t: the elements whose draw lies in [p_{t-1}, p_t), in element order, rounded to bf16
        low = rates[t - 1] if t else 0.0
        assert np.array_equal(cut.tiers[t], np.frombuffer(_bf16(flat[(u >= low) & (u < p)]).tobytes(), "<u2")[1::2])
        want = np.where(u < p, _bf16(flat) / np.float32(p), 0).astype(np.float32)
        rebuilt = dare.Reconstruction([from_bf16_bits(v) for v in cut.tiers[: t + 1]], rates[: t + 1], 7, flat.size)
        assert np.allclose(rebuilt.elements(0, flat.size), want, rtol=1e-6)
        # the recorded residual and kept energy are what the reconstruction gives
        d64 = flat.astype(np.float64)
        assert cut.residuals[t] == pytest.approx(float(np.linalg.norm(d64 - want)), rel=1e-5)
        kept = d64[u < p]
        assert cut.kept[t] == pytest.approx(float(kept @ kept), rel=1e-2)
    assert cut.energy == pytest.approx(float(flat.astype(np.float64) @ flat), rel=1e-6)
    assert dare.stored_bound([v.size for v in cut.tiers]) <= 40_000


@settings(max_examples=40, deadline=None)
@given(start=st.integers(0, 199_999), length=st.integers(1, 70_000))
def test_any_stretch_of_a_reconstruction_is_that_stretch_of_the_whole(start, length):
    delta = np.random.default_rng(1).standard_normal(200_000).astype(np.float32)
    rates = dare.rates_for(delta.size, 80_000)
    cut = dare.split(delta, 3, rates)
    rebuilt = dare.Reconstruction([from_bf16_bits(v) for v in cut.tiers], rates, 3, delta.size)
    stop = min(delta.size, start + length)
    assert np.array_equal(rebuilt.elements(start, stop), _whole(rebuilt)[start:stop])


_WHOLE: dict[int, np.ndarray] = {}


def _whole(rebuilt: dare.Reconstruction) -> np.ndarray:
    if id(rebuilt.tiers[0]) not in _WHOLE:  # hypothesis reruns: the whole once per reconstruction
        _WHOLE.clear()
        _WHOLE[id(rebuilt.tiers[0])] = rebuilt.elements(0, rebuilt.size)
    return _WHOLE[id(rebuilt.tiers[0])]


def test_the_draws_of_a_stretch_are_those_of_the_whole_stream():
    whole = dare.uniforms(11, 0, 5000)
    assert np.array_equal(dare.uniforms(11, 1234, 4321), whole[1234:4321])
    assert not np.array_equal(dare.uniforms(12, 0, 100), whole[:100])


def test_a_budget_too_small_for_a_tier_keeps_the_tensor_exact():
    assert dare.rates_for(10_000, 100) == []
    assert dare.rates_for(10_000, 10**9)[-1] == dare.MAX_RATE


def test_a_tier_whose_values_do_not_match_its_seed_is_refused():
    delta = np.random.default_rng(2).standard_normal(50_000).astype(np.float32)
    rates = dare.rates_for(delta.size, 30_000)
    cut = dare.split(delta, 5, rates)
    with pytest.raises(ValueError, match="tier 0"):
        dare.Reconstruction([cut.tiers[0][:-1], *cut.tiers[1:]], rates, 5, delta.size)


@pytest.fixture
def dared(repo):
    base = commit_experts(repo, 20)
    for name in ("e1", "e2"):
        repo.sketch(name, share="30%", kind="dare")
    return repo, base


def test_a_dare_sketch_is_stored_within_its_share_with_positions_of_its_own(dared):
    repo, base = dared
    records = [repo.sketch_record(n) for n in ("e1", "e2")]
    for record in records:
        assert record is not None and record.kind == "dare" and record.params["algorithm"] == "dare"
        assert record.tensors and record.stored_bytes <= 0.3 * record.expert_bytes
        assert all(ts.rates and ts.rank == len(ts.rates) == len(ts.kept) for ts in record.tensors)
    # two experts keep independent positions: one mask for both would drop the same elements
    assert {ts.stream for ts in records[0].tensors}.isdisjoint(ts.stream for ts in records[1].tensors)
    # what is stored is the expert's delta at the seed's positions
    mine = repo.state_dict("e1")
    tensors = {tp.name: tp.base for tp in repo.merge_plan(["e1"], "task_arithmetic", weight=1.0)[0].tensors}
    offers = sketch_ops.offers(repo.ctx, repo.resolve("e1"), tensors)
    ts = records[0].tensors[0]
    delta = (mine[ts.name].float() - base[ts.name].float()).numpy().reshape(-1)
    u = dare.uniforms(ts.stream, 0, delta.size)
    values = [
        np.frombuffer(b"".join(bytes(repo.store.get(c.id)) for c in level[0].chunks), "<u2")
        for level in offers[ts.name].blocks
    ]
    assert np.array_equal(np.frombuffer(_bf16(delta[u < ts.rates[0]]).tobytes(), "<u2")[1::2], values[0])
    empty = repo.sketch("e1", against="e1", kind="dare", force=True)
    assert empty.created and empty.record.tensors == []


def test_a_budgeted_merge_reads_dare_sketches_within_the_budget(dared):
    repo, base = dared
    full = repo.merge(["e1", "e2"], "task_arithmetic", branch="full", checkout=False, weight=WEIGHTS)
    sha = repo.merge(["e1", "e2"], "task_arithmetic", branch="b", checkout=False, budget="10%", weight=WEIGHTS)
    record = repo.merge_record(sha)
    b = record["budget"]
    assert b["sketches"]["used"] > 0 and record["bytes"]["experts_measured"] <= b["limit_bytes"]
    assert b["expert_bytes_planned"] <= b["limit_bytes"]
    # a sketched tensor of the merge is base + Σ a_k Δ̂_k, Δ̂_k rebuilt from the tiers the plan read
    merged, e = repo.state_dict("b"), {n: repo.state_dict(n) for n in ("e1", "e2")}
    plan = {t["name"]: t["budget"] for t in record["tensors"] if "budget" in t}
    name = next(n for n, p in plan.items() if p.get("sketch_ranks") and all(p["sketch_ranks"]))
    want = base[name].double()
    for k, expert in enumerate(("e1", "e2")):
        ts = next(t for t in repo.sketch_record(expert).tensors if t.name == name)
        tiers = plan[name]["sketch_ranks"][k]
        d = (e[expert][name].float() - base[name].float()).numpy().reshape(-1)
        u = dare.uniforms(ts.stream, 0, d.size)
        p = ts.rates[tiers - 1]
        want = want + WEIGHTS[k] * torch.from_numpy(np.where(u < p, _bf16(d) / np.float32(p), 0)).reshape(want.shape)
    assert torch.allclose(merged[name].double(), want, atol=1e-5)
    # the error bound holds (affine: Σ |a| ‖Δ − Δ̂‖ + rounding)
    err = sum(float((merged[n].double() - repo.state_dict(full)[n].double()).square().sum()) for n in merged)
    assert err**0.5 <= b["error_bound"] + b["rounding_allowance"]
    at_full = repo.merge(["e1", "e2"], "task_arithmetic", branch="all", checkout=False, weight=WEIGHTS, budget="100%")
    assert all(torch.equal(repo.state_dict(at_full)[n], repo.state_dict(full)[n]) for n in merged)


def test_the_cli_makes_a_dare_sketch_and_shows_its_keep_rates(dared):
    repo, _ = dared
    doc = invoke("sketch", "e2", "--kind", "dare", "--share", "20%", "--force", "--json", cwd=repo.root, check=True)
    assert '"kind": "dare"' in doc.stdout and '"created": true' in doc.stdout
    shown = invoke(
        *"merge --method task_arithmetic --weights 0.5,0.5 e1 e2 --budget 10% --dry-run".split(),
        cwd=repo.root,
        check=True,
    )
    assert "sketch p=" in shown.stdout


def test_config_sketch_kind_picks_what_a_commit_sketches_and_a_bad_one_commits_nothing(repo):
    from helpers.models import commit_model, llama_state_dict, write_model
    from helpers.sketches import SPEC, low_rank_finetune

    base = llama_state_dict(SPEC, seed=3, dtype=torch.float32)
    commit_model(repo, base, "base")
    repo.config_set("sketch.kind", "sparse")
    write_model(repo.root / "model", low_rank_finetune(base, 5))
    repo.add(["model"])
    head = repo.resolve("HEAD")
    with pytest.raises(BadInputError, match="sketch.kind"):
        repo.commit("tuned", sketch="20%")
    assert repo.resolve("HEAD") == head
    repo.config_set("sketch.kind", "dare")
    made = repo.commit("tuned", sketch="20%")
    assert repo.sketch_record(made).kind == "dare"


def test_a_partial_clone_fetches_only_the_dare_tiers_it_reads(dared, tmp_path):
    from mgit import Repository

    repo, _ = dared
    remote = tmp_path / "remote"
    push_experts(repo, remote)
    partial = Repository.clone(str(remote), tmp_path / "partial", partial=True)
    assert partial.sketch_record("origin/e1") == repo.sketch_record("e1")
    sha = partial.merge(
        ["origin/e1", "origin/e2"], "task_arithmetic", branch="m", checkout=False, budget="5%", weight=WEIGHTS
    )
    record = partial.merge_record(sha)
    assert record["budget"]["sketches"]["used"] > 0
    assert record["bytes"]["experts_fetched"] <= record["budget"]["limit_bytes"]


def test_the_tensors_a_sketch_leaves_exact_are_read_first_at_a_small_budget(dared):
    repo, base = dared
    sha = repo.merge(["e1", "e2"], "task_arithmetic", branch="s", checkout=False, budget="5%", weight=WEIGHTS)
    record = repo.merge_record(sha)
    small = [t for t in record["tensors"] if "budget" in t and base[t["name"]].dim() == 1]
    assert small and all(t["budget"]["chosen"] == t["budget"]["candidates"] for t in small)
    assert record["bytes"]["experts_measured"] <= record["budget"]["limit_bytes"]
    # a budget below them is still a budget: then they compete with the sketches
    tiny = repo.merge(["e1", "e2"], "task_arithmetic", branch="t", checkout=False, budget="0.2%", weight=WEIGHTS)
    assert repo.merge_record(tiny)["bytes"]["experts_measured"] <= repo.merge_record(tiny)["budget"]["limit_bytes"]
