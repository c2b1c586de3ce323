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
