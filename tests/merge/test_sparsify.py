"""Sparsifier decisions: made on a whole delta, applied to any slice with the same bits."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit.merge.sparsify import (
    Sampling,
    dare_sparsity,
    della_sparsity,
    magnitude_sparsity,
    outlier_sparsity,
    trim_magnitude,
)


def _delta(n: int, seed: int, zeros: float = 0.3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    d = (torch.randint(-4, 5, (n,), generator=g).float() * 0.003).to(torch.bfloat16)  # many equal magnitudes
    d[torch.rand(n, generator=g) < zeros] = 0
    return d


DECIDERS = {
    "magnitude": lambda d: magnitude_sparsity(d, 0.4),
    "magnitude-rescaled": lambda d: magnitude_sparsity(d, 0.6, rescale=True),
    "outliers": lambda d: outlier_sparsity(d, 0.5, 0.1),
    "dare": lambda d: dare_sparsity(d, 0.5, True, Sampling(torch.Generator().manual_seed(3))),
    "della": lambda d: della_sparsity(d, 0.5, 0.2, True, Sampling(torch.Generator().manual_seed(4))),
}


@pytest.mark.parametrize("decider", sorted(DECIDERS))
@settings(max_examples=25, deadline=None)
@given(n=st.integers(1, 700), cuts=st.lists(st.integers(0, 700), max_size=6), seed=st.integers(0, 50))
def test_a_decision_applies_slice_by_slice_with_the_same_bits(decider, n, cuts, seed):
    delta = _delta(n, seed)
    if decider == "della" and n < 2:
        return
    decision = DECIDERS[decider](delta)
    whole = decision.apply(delta)
    bounds = sorted({0, n, *(c for c in cuts if c < n)})
    for packed in (decision, decision.packed()):
        pieces = [packed.apply(delta[a:b], a) for a, b in zip(bounds, bounds[1:], strict=False)]
        assert torch.equal(torch.cat(pieces).view(torch.int16), whole.view(torch.int16))


def test_sparse_deltas_skip_the_sort_with_the_same_result(monkeypatch):
    """At most k non-zeros: all are kept without sorting, as the sort would keep them."""
    delta = _delta(1000, 1, zeros=0.8)
    expected = trim_magnitude(delta, 0.5)
    import mgit.merge.sparsify as sparsify

    monkeypatch.setattr(sparsify, "_magnitude_order", lambda *a, **k: pytest.fail("sorted"))
    assert torch.equal(trim_magnitude(delta, 0.5).view(torch.int16), expected.view(torch.int16))
    kept = expected != 0
    assert torch.equal(kept, delta != 0)


def test_packed_decisions_take_an_eighth_of_the_memory():
    decision = magnitude_sparsity(_delta(8000, 2), 0.5)
    assert decision.keep is not None and decision.keep.dtype == torch.bool
    assert decision.packed().bits.nbytes == 1000 and decision.packed().keep is None


def _mergekit_keep(delta: torch.Tensor, density: float, descending: bool) -> torch.Tensor:
    """mergekit's ranking on the CPU: argsort of the float32 magnitudes, the first k kept."""
    n = delta.numel()
    k = max(1, int(density * n))
    order = torch.argsort(delta.abs().reshape(-1).float(), descending=descending)
    keep = torch.zeros(n, dtype=torch.bool)
    keep[order[:k] if descending else order[n - k :]] = True
    return keep


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64])
@pytest.mark.parametrize("sorts_as_float32", [True, False])
def test_the_magnitude_ranking_keeps_what_the_float32_argsort_keeps(monkeypatch, dtype, sorts_as_float32):
    """Whatever dtype the magnitudes are sorted in, and whether or not in the delta's buffer,
    ties (most magnitudes here) fall as in torch.argsort of the float32 copy."""
    import mgit.merge.sparsify as sparsify

    if not sorts_as_float32:  # a torch whose float32 sort is another algorithm: float32 keys
        monkeypatch.setattr(sparsify, "_sorts_as_float32", lambda dtype: dtype == torch.float32)
    delta = _delta(200_003, 5).to(dtype)
    assert int(torch.count_nonzero(delta)) > 0.4 * delta.numel()  # the sort runs
    expected = _mergekit_keep(delta, 0.4, descending=True)
    assert torch.equal(magnitude_sparsity(delta.clone(), 0.4).keep, expected)
    assert torch.equal(magnitude_sparsity(delta.clone(), 0.4, overwrite=True).keep, expected)
    # Breadcrumbs ranks ascending: density 0.5, no outliers, keeps the upper half of the order
    ascending = _mergekit_keep(delta, 0.5, descending=False)
    assert torch.equal(outlier_sparsity(delta.clone(), 0.5, 0.0, overwrite=True).keep, ascending)


def test_an_overwriting_ranking_sorts_a_bf16_delta_in_its_own_buffer(monkeypatch):
    """Where TIES sorts whole embeddings (sort_select off), the magnitudes are sorted where the
    delta is, in bf16, not in a float32 copy (6 bytes per element less than mergekit's way)."""
    import mgit.merge.sparsify as sparsify

    monkeypatch.setattr(sparsify, "SELECT_FROM", 2**62)
    sorted_in: list[tuple[int, torch.dtype]] = []
    real_sort = torch.sort

    def spy(values, *args, **kwargs):
        sorted_in.append((values.data_ptr(), values.dtype))
        return real_sort(values, *args, **kwargs)

    monkeypatch.setattr(sparsify.torch, "sort", spy)
    delta = _delta(50_000, 6)
    magnitude_sparsity(delta, 0.3, overwrite=True)
    assert sorted_in == [(delta.data_ptr(), torch.bfloat16)]
    assert bool((delta >= 0).all())  # what is left there: the sorted magnitudes


def test_a_large_ranking_selects_in_the_deltas_own_buffer_without_sorting(monkeypatch):
    """Above SELECT_FROM the kept range comes from sort_select, on the bf16 magnitudes' bits in
    the delta's own buffer (overwrite): no torch.sort, and the same elements as mergekit's."""
    import mgit.merge.sort_select as sort_select
    import mgit.merge.sparsify as sparsify

    if not sparsify.select_reproduces_torch():
        pytest.skip("this torch's sort is not libstdc++'s introsort: rankings sort")
    monkeypatch.setattr(sparsify.torch, "sort", lambda *a, **k: pytest.fail("sorted"))
    seen: list[int] = []
    real = sort_select.sorted_range
    monkeypatch.setattr(sparsify, "sorted_range", lambda v, *a: seen.append(v.ctypes.data) or real(v, *a))
    delta = _delta(50_000, 6)
    expected = _mergekit_keep(delta, 0.3, descending=True)
    assert torch.equal(magnitude_sparsity(delta, 0.3, overwrite=True).keep, expected)
    assert seen == [delta.data_ptr()]


@pytest.mark.parametrize("why", ["nan", "heapsort", "another sort"])
def test_rankings_sort_where_sort_select_cannot_answer(monkeypatch, why):
    """NaN magnitudes (torch orders them by its own rule), introsort's heapsort fallback, or a torch
    whose sort sort_select does not replay: the ranking sorts, and keeps what mergekit keeps."""
    import mgit.merge.sort_select as sort_select
    import mgit.merge.sparsify as sparsify

    delta = _delta(60_001, 8)
    if why == "nan":
        delta[::997] = float("nan")
    elif why == "heapsort":
        monkeypatch.setattr(sort_select, "depth_limit", lambda n: 2)
    else:
        monkeypatch.setattr(sparsify, "select_reproduces_torch", lambda: False)
    sorts: list[int] = []
    real_sort = torch.sort
    monkeypatch.setattr(sparsify.torch, "sort", lambda *a, **k: sorts.append(1) or real_sort(*a, **k))
    expected = _mergekit_keep(delta, 0.4, descending=True)
    for overwrite in (False, True):
        assert torch.equal(magnitude_sparsity(delta.clone(), 0.4, overwrite=overwrite).keep, expected)
    assert sorts == [1, 1]


def test_a_sort_select_that_differs_from_torch_fails_the_probe_and_rankings_sort(monkeypatch):
    """Forced mismatch: sort_select answering otherwise than torch's argsort (one element's place
    flipped). The once-per-process probe sees it, and rankings keep what mergekit keeps by sorting."""
    import mgit.merge.sparsify as sparsify

    real = sparsify.sorted_range

    def flipped(values, lo, hi, descending, *args, **kwargs):
        mask = real(values, lo, hi, descending, *args, **kwargs)
        if mask is not None:
            mask[0] = not mask[0]
        return mask

    monkeypatch.setattr(sparsify, "sorted_range", flipped)
    sparsify.select_reproduces_torch.cache_clear()
    try:
        assert not sparsify.select_reproduces_torch()
        delta = _delta(60_001, 9)
        expected = _mergekit_keep(delta, 0.4, descending=True)
        assert torch.equal(magnitude_sparsity(delta, 0.4, overwrite=True).keep, expected)
    finally:
        sparsify.select_reproduces_torch.cache_clear()


def test_a_rescaling_ranking_leaves_the_delta_as_it_was():
    """Rescaling needs the delta after the ranking, so overwrite=True does not touch it."""
    delta = _delta(50_000, 7)
    before = delta.clone()
    decision = magnitude_sparsity(delta, 0.3, rescale=True, overwrite=True)
    assert torch.equal(delta.view(torch.int16), before.view(torch.int16))
    assert torch.equal(decision.keep, magnitude_sparsity(before, 0.3, rescale=True).keep)
