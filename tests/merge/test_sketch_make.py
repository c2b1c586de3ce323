"""One tensor's sketch made from its delta (mgit.merge.sketch.make): the blocks it stores and the
record it makes, without a repository."""

from __future__ import annotations

import numpy as np
import pytest

from mgit.merge.sketch import dare, lowrank, make
from mgit.model.stats import from_bf16_bits


def _low_rank(m: int, n: int, rank: int, seed: int = 0) -> np.ndarray:
    g = np.random.default_rng(seed)
    return (g.standard_normal((m, rank)) @ g.standard_normal((rank, n))).astype(np.float32)


def test_a_low_rank_sketch_stores_its_rank_blocks_as_bf16_and_measures_them():
    delta = _low_rank(96, 64, 5)
    rank = make.size_for("lowrank", (96, 64), lowrank.stored_bound((96, 64), 8))
    assert rank == 8
    made = make.make("lowrank", "f.safetensors", "w", delta, rank, 0, seed=3, commit="c" * 40)
    assert made is not None
    ts = made.sketch
    assert (ts.file, ts.name, ts.shape, ts.kind, ts.stored_bytes) == ("f.safetensors", "w", (96, 64), "lowrank", 0)
    assert ts.ends() == lowrank.block_ends(ts.rank)
    sizes = [e - s for s, e in zip([0, *ts.ends()], ts.ends(), strict=False)]
    assert [[(name, len(a)) for name, a in level] for level in made.levels] == [[("a", n), ("b", n)] for n in sizes]
    assert all(a.dtype == np.uint16 for level in made.levels for _, a in level)  # bf16 bit patterns
    assert ts.energy == pytest.approx(float(np.square(delta.astype(np.float64)).sum()), rel=1e-6)
    a_t = np.concatenate([from_bf16_bits(a) for level in made.levels for name, a in level if name == "a"])
    b_t = np.concatenate([from_bf16_bits(b) for level in made.levels for name, b in level if name == "b"])
    approx = lowrank.rows_of(a_t, b_t, 0, 96).astype(np.float64)
    assert ts.residuals[-1] == pytest.approx(float(np.linalg.norm(delta - approx)), rel=1e-3, abs=1e-4)
    assert ts.residuals[-1] < 0.01 * ts.energy**0.5  # rank 5 inside rank 8: only bf16's rounding is left


def test_a_zero_delta_has_no_sketch_of_either_kind():
    zero = np.zeros((64, 300), np.float32)
    assert make.make("lowrank", "f", "w", zero, 8, 0, seed=0, commit="c") is None  # the exact route
    wide = np.zeros((256, 300), np.float32)  # rank 8 + oversampling is under a quarter: the randomized route
    assert make.make("lowrank", "f", "w", wide, 8, 0, seed=0, commit="c") is None
    rank_two = np.zeros((256, 300), np.float32)
    rank_two[:2, :2] = np.eye(2)  # two directions: the randomized route keeps two, not eight
    a_t, b_t, sigma = lowrank.factorize(rank_two, 8, seed=0)
    assert len(sigma) == 2 and a_t.shape == (2, 256) and b_t.shape == (2, 300)
    rates = make.size_for("dare", (64, 300), 10**6)
    assert rates and make.make("dare", "f", "w", zero, rates, 10**6, seed=0, commit="c") is None


def test_a_dare_sketch_keeps_the_tiers_that_fit_its_budget_from_the_commits_own_stream():
    delta = _low_rank(64, 300, 3)
    budget = 10**5
    rates = make.size_for("dare", (64, 300), budget)
    assert rates == dare.rates_for(64 * 300, budget)
    made = make.make("dare", "f", "w", delta, rates, budget, seed=1, commit="a" * 40)
    assert made is not None
    ts = made.sketch
    assert ts.kind == "dare" and ts.rates == rates[: ts.rank] and ts.stream == make.stream_seed(1, "a" * 40, "w")
    assert [[name for name, _ in level] for level in made.levels] == [["v"]] * ts.rank
    assert dare.stored_bound([v.size for level in made.levels for _, v in level]) <= budget
    tight = dare.stored_bound([made.levels[0][0][1].size]) - 1  # not even the lowest tier fits
    assert make.make("dare", "f", "w", delta, rates, tight, seed=1, commit="a" * 40) is None


def test_seeds_are_stable_per_tensor_and_a_dare_stream_differs_per_commit():
    assert make.tensor_seed(0, "w") == make.tensor_seed(0, "w")
    assert len({make.tensor_seed(0, "w"), make.tensor_seed(1, "w"), make.tensor_seed(0, "v")}) == 3
    assert make.stream_seed(0, "a" * 40, "w") != make.stream_seed(0, "b" * 40, "w")
    assert 0 <= make.tensor_seed(7, "w") < 2**63


def test_the_record_names_each_kinds_algorithm():
    assert make.params("lowrank")["algorithm"] == "svd" and make.params("lowrank")["version"] == lowrank.VERSION
    assert make.params("dare")["algorithm"] == "dare" and make.params("dare")["max_tiers"] == dare.MAX_TIERS
