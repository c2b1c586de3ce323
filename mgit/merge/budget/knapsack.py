"""Choosing which expert chunks to read under a byte budget: a 0/1 knapsack.

Each candidate chunk has a cost (bytes to read or fetch) and a value (its importance,
|w_k|·‖Δ_k,c‖). Exact 0/1 knapsack is NP-hard in the byte budget, so we use the classic
density greedy with the best-single-item guard, which is within a factor 2 of the optimum:
take candidates by value/cost (highest first), each one that still fits; then, if a single
candidate that fits alone is worth more than everything taken, take it instead. (Proof
sketch: the greedy's prefix up to the first candidate that does not fit, plus that
candidate, is worth at least the fractional optimum ≥ the optimum; the guard covers that
candidate.) Ties are broken by the candidates' order, so the choice is deterministic.

``choose_uniform`` is the baseline the benchmark compares against: chunks in a seeded
random order, each taken while it fits.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Item:
    cost: int  # bytes
    value: float  # importance


def choose_by_density(items: Sequence[Item], limit: int) -> list[bool]:
    """Which items to take (within ``limit`` bytes), at least half the optimal value."""
    if sum(i.cost for i in items) <= limit:
        return [True] * len(items)

    def density(n: int) -> float:
        item = items[n]
        return item.value / item.cost if item.cost > 0 else float("inf")

    order = sorted(range(len(items)), key=lambda n: -density(n))  # stable: ties keep item order
    taken, left, value = [False] * len(items), limit, 0.0
    for n in order:
        if items[n].cost <= left:
            taken[n] = True
            left -= items[n].cost
            value += items[n].value
    best = max((n for n in range(len(items)) if items[n].cost <= limit), key=lambda n: items[n].value, default=None)
    if best is not None and items[best].value > value:
        return [n == best for n in range(len(items))]
    return taken


def fractional_bound(items: Sequence[Item], limit: int) -> float:
    """The most value any choice within ``limit`` can reach: the fractional knapsack's optimum
    (items by density, the last one cut). No whole-item choice exceeds it, so it tells how
    close a plan is to the best possible at its budget."""
    left, value = float(limit), 0.0
    for item in sorted(items, key=lambda i: -(i.value / i.cost if i.cost > 0 else float("inf"))):
        if item.cost <= left:
            left -= item.cost
            value += item.value
        else:
            return value + (item.value * left / item.cost if item.cost > 0 else item.value)
    return value


def choose_uniform(items: Sequence[Item], limit: int, seed: int) -> list[bool]:
    """Items in a seeded random order, each taken while it fits (the benchmark's baseline)."""
    order = list(range(len(items)))
    random.Random(seed).shuffle(order)
    taken, left = [False] * len(items), limit
    for n in order:
        if items[n].cost <= left:
            taken[n] = True
            left -= items[n].cost
    return taken
