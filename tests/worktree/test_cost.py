"""mgit.worktree.cost on its own: checkout cost arithmetic and its refusals, over sizes alone
(no store, no remote)."""

from __future__ import annotations

import pytest

from mgit.errors import BadInputError
from mgit.worktree.cost import (
    NARROW,
    CheckoutCost,
    FetchQuote,
    after_fetch,
    checkout_budget,
    deltas_over_budget,
    estimate,
    over_budget,
)

READ_COST = {"a": 100, "b": 30, "c": 7}


def test_a_full_clone_reads_every_read_at_its_store_cost():
    cost = estimate(["a", "b", "a"], READ_COST.__getitem__)
    assert cost == CheckoutCost(read=230, fetch=0, verify=0) and cost.total == 230
    assert estimate([], READ_COST.__getitem__) == CheckoutCost()


def test_a_quoted_chunk_is_fetched_once_and_read_each_time():
    quote = FetchQuote(fetch={"x": 50, "y": 20}, read={"x": 50 + 32 + 100, "y": 20}, verify=100)
    cost = estimate(["a", "x", "y", "x"], READ_COST.__getitem__, quote)
    assert cost == CheckoutCost(read=100 + 100 + 182 + 20 + 182, fetch=70, verify=100)
    assert cost.total == 654


def test_after_a_fetch_verification_reads_are_what_was_charged_beyond_the_wire():
    assert after_fetch(spent=120, wire=90, reads=400) == CheckoutCost(read=430, fetch=90)


def test_a_checkout_budget_is_a_size():
    assert checkout_budget(None) is None
    assert checkout_budget("2kB") == 2000 and checkout_budget(5) == 5 and checkout_budget("1KiB") == 1024
    with pytest.raises(BadInputError, match="not a share"):
        checkout_budget("10%")


def test_refusals_are_one_line_naming_estimate_budget_and_remedy():
    cost = CheckoutCost(read=1500, fetch=2500)
    assert over_budget(cost, 999, "origin") == (
        "checkout needs 4.0 kB (4000 bytes): 1.5 kB read from the chunk store + 2.5 kB fetched from origin; "
        f"the budget is 999 bytes; {NARROW}"
    )
    assert over_budget(CheckoutCost(read=1), 0, None, " (again)") == (
        "checkout (again) needs 1 byte: 1 byte read from the chunk store + nothing to fetch (a full clone); "
        f"the budget is 0 bytes; {NARROW}"
    )
    assert deltas_over_budget(2000, cost, 3000, "origin") == (
        "checkout needs more than its budget of 3.0 kB (3000 bytes): the chunks fetched from origin are deltas, "
        "whose bases must be fetched or read to verify them (at least 3.5 kB in all); "
        f"{NARROW}, or fetch the revision they derive from first"
    )
