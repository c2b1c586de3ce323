"""sort_select: the elements torch's CPU argsort puts in a range of positions, found without sorting.

Every case compares against ``torch.argsort`` itself (what mergekit ranks with), on tie-heavy
inputs: among equal values, which ones fall inside the range is what there is to get right.
"""

from __future__ import annotations

import tracemalloc

import numpy as np
import pytest
import torch
from helpers.introsort import introsort_order
from hypothesis import given, settings
from hypothesis import strategies as st

import mgit.merge.sort_select as sort_select
from mgit.merge.sort_select import LEAF, depth_limit, sorted_range
from mgit.merge.sparsify import select_reproduces_torch


def _torch_sorts_by_introsort() -> bool:
    """Whether this torch's CPU argsort is libstdc++'s introsort (the one sort_select replays),
    judged by the reference implementation alone, so a broken sort_select fails rather than skips."""
    rng = np.random.default_rng(11)
    for n in (40, 700):
        values = rng.integers(0, 6, n).astype(np.float32)
        for descending in (True, False):
            order = torch.argsort(torch.from_numpy(values), descending=descending).tolist()
            if order != introsort_order(values.tolist(), descending):
                return False
    return True


pytestmark = pytest.mark.skipif(
    not _torch_sorts_by_introsort(), reason="this torch's CPU sort is not libstdc++'s introsort; rankings sort instead"
)


@pytest.fixture(autouse=True, params=["as shipped", "always nested"])
def nesting(request, monkeypatch):
    """Every case runs as shipped and with every one-open-side first partition nested
    (``NEST_BELOW`` makes that choice by a memory estimate; the answer must not depend on it)."""
    if request.param == "always nested":
        monkeypatch.setattr(sort_select, "NEST_BELOW", float("inf"))
    return request.param


def test_the_once_per_process_probe_finds_that_sort_select_reproduces_this_torch():
    assert select_reproduces_torch()


@pytest.mark.parametrize("descending", [True, False])
def test_the_reference_introsort_is_torchs_permutation(descending):
    values = np.random.default_rng(5).integers(0, 9, 3000).astype(np.float32)
    expected = torch.argsort(torch.from_numpy(values), descending=descending).tolist()
    assert introsort_order(values.tolist(), descending) == expected


def _argsort_range(values: np.ndarray, lo: int, hi: int, descending: bool) -> np.ndarray:
    order = torch.argsort(torch.from_numpy(values.astype(np.float32)), descending=descending).numpy()
    keep = np.zeros(len(values), dtype=bool)
    keep[order[lo:hi]] = True
    return keep


def _check(values: np.ndarray, lo: int, hi: int, descending: bool) -> None:
    got = sorted_range(values.copy(), lo, hi, descending)
    assert got is not None
    assert np.array_equal(got, _argsort_range(values, lo, hi, descending))


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(0, 3000),
    distinct=st.sampled_from([1, 2, 3, 10, 97, 5000]),
    ends=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    descending=st.booleans(),
    bits=st.booleans(),
    seed=st.integers(0, 2**32 - 1),
)
def test_the_range_holds_what_argsort_puts_there(n, distinct, ends, descending, bits, seed):
    values = np.random.default_rng(seed).integers(0, distinct, n).astype(np.uint16 if bits else np.float32)
    lo, hi = sorted(int(e * n) for e in ends)
    _check(values, lo, hi, descending)


@pytest.mark.parametrize("n", [LEAF, LEAF + 1, 2 * LEAF + 1, 65_537, 300_001])
@pytest.mark.parametrize("descending", [True, False])
def test_segment_and_block_edges(n, descending):
    rng = np.random.default_rng(n)
    values = rng.integers(0, 40, n).astype(np.float32)
    for lo, hi in ((0, n // 2), (n // 3, n), (0, n), (n // 4, n // 4 + 1), (1, n - 1)):
        _check(values, lo, hi, descending)


def test_sorted_and_reversed_inputs():
    """Already ordered inputs move the median-of-three pivots to their extremes."""
    n = 100_003
    for values in (np.arange(n, dtype=np.float32), np.arange(n, 0, -1).astype(np.float32), np.zeros(n, np.float32)):
        for descending in (True, False):
            _check(values, 0, n // 7, descending)


def test_a_ties_trim_of_bf16_deltas_keeps_what_mergekit_keeps():
    """A fine-tune-like bf16 delta, ranked as TIES does: its magnitude bits, the top half."""
    g = torch.Generator().manual_seed(3)
    base = (torch.randn(2_000_000, generator=g) * 0.02).bfloat16()
    delta = (base.float() + torch.randn(base.shape, generator=g) * 3e-4).bfloat16() - base
    bits = delta.abs().view(torch.int16).numpy().view(np.uint16)
    k = delta.numel() // 2
    order = torch.argsort(delta.abs().float(), descending=True)
    expected = torch.zeros(delta.numel(), dtype=torch.bool)
    expected[order[:k]] = True
    got = sorted_range(bits.copy(), 0, k, True)
    assert got is not None and torch.equal(torch.from_numpy(got), expected)


def test_empty_and_whole_ranges():
    values = np.random.default_rng(0).integers(0, 5, 1000).astype(np.float32)
    assert not sorted_range(values.copy(), 300, 300, True).any()
    assert not sorted_range(values.copy(), 700, 200, False).any()
    assert sorted_range(values.copy(), 0, 1000, True).all()
    assert sorted_range(values.copy(), -5, 5000, False).all()
    assert sorted_range(np.empty(0, np.float32), 0, 0, True).size == 0


def test_where_introsort_would_heapsort_it_answers_none_and_puts_the_values_back():
    values = np.random.default_rng(1).integers(0, 9, 50_000).astype(np.uint16)
    before = values.copy()
    assert depth_limit(len(values)) == 2 * 15
    assert sorted_range(values, 0, 20_000, True, depth=3) is None
    assert np.array_equal(values, before)
    assert sorted_range(values, 0, 20_000, True, depth=0) is None
    assert np.array_equal(values, before)


@settings(max_examples=80, deadline=None)
@given(
    n=st.integers(LEAF + 1, 6000),
    distinct=st.sampled_from([2, 10, 97, 5000]),
    ends=st.tuples(st.floats(0, 1), st.floats(0, 1)),
    descending=st.booleans(),
    depth=st.integers(1, 7),
    seed=st.integers(0, 2**32 - 1),
)
def test_a_cut_short_selection_puts_back_every_swap(n, distinct, ends, descending, depth, seed):
    """Out of recursion budget at any depth, whichever sides of the first partition were still
    open (one: TIES's top k; both: a Breadcrumbs window), the values are back in their order."""
    values = np.random.default_rng(seed).integers(0, distinct, n).astype(np.float32)
    before = values.copy()
    lo, hi = sorted(int(e * n) for e in ends)
    got = sorted_range(values, lo, hi, descending, depth=depth)
    if got is None:
        assert np.array_equal(values, before)
    else:
        assert np.array_equal(got, _argsort_range(before, lo, hi, descending))


def _traced_peak(values: np.ndarray, lo: int, hi: int) -> tuple[np.ndarray | None, int]:
    tracemalloc.start()
    try:
        got = sorted_range(values, lo, hi, True)
        return got, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_lopsided_first_partition_ranks_its_open_side_without_a_position_for_each_element(monkeypatch):
    """A pivot at the bottom (the three samples of median-of-three are the smallest values) puts
    nearly everything on one side: nesting it holds 8 bytes per swap instead of 4 per element,
    the same answer."""
    n = 4_000_000
    values = np.random.default_rng(4).integers(1, 1000, n, dtype=np.uint16)
    values[[1, n // 2, n - 1]] = 0
    expected = _argsort_range(values, 0, n // 2, True)
    monkeypatch.setattr(sort_select, "NEST_BELOW", 0.0)
    dense, dense_peak = _traced_peak(values.copy(), 0, n // 2)
    monkeypatch.setattr(sort_select, "NEST_BELOW", 0.25)
    nested, nested_peak = _traced_peak(values.copy(), 0, n // 2)
    assert dense is not None and np.array_equal(dense, expected)
    assert nested is not None and np.array_equal(nested, expected)
    assert nested_peak < dense_peak - n  # measured: 4.6 against 5.9 bytes per element
