"""Choosing which expert chunks to read under a byte budget: a 0/1 knapsack, by the density greedy
with the best-single-item guard (within a factor 2 of the optimum, deterministic on ties).

``choose_uniform`` is the benchmarks' baseline: chunks in a seeded random order, each taken while
it fits. Why the greedy is within 2: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import math
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


def choose_options(groups: Sequence[Sequence[Item]], limit: int) -> list[int]:
    """A multiple-choice knapsack: at most one option per group (a tensor's sketch ranks or its
    exact chunks), the chosen options' costs within ``limit``; returns each group's option
    index, -1 for none. At least half the optimal value.

    The greedy on each group's upper convex hull (Sinha & Zoltners): the hull's steps, by
    value gained per byte (falling within a group, so taken in order), each while it fits;
    a group whose step does not fit takes none of its later ones. Then, if a single option
    that fits alone is worth more than all that, it alone. (Proof sketch: the steps up to the
    first that does not fit, plus that step, are worth at least the LP relaxation's optimum ≥
    the optimum; that step is worth at most its option, which fits alone.) Ties keep the
    groups' order, so the choice is deterministic."""
    chosen, blocked, left, total = [-1] * len(groups), set(), limit, 0.0
    for _, g, n, dc, dv in _steps(groups, limit):
        if g in blocked:
            continue
        if dc <= left:
            chosen[g], left, total = n, left - dc, total + dv
        else:
            blocked.add(g)
    best = max(
        ((g, n) for g, options in enumerate(groups) for n, o in enumerate(options) if o.cost <= limit),
        key=lambda gn: groups[gn[0]][gn[1]].value,
        default=None,
    )
    if best is not None and groups[best[0]][best[1]].value > total:
        return [best[1] if g == best[0] else -1 for g in range(len(groups))]
    return chosen


def options_bound(groups: Sequence[Sequence[Item]], limit: int) -> float:
    """The most value any choice of :func:`choose_options` within ``limit`` can reach: the LP
    relaxation's optimum (the hull steps by density, the last one cut)."""
    left, value = float(limit), 0.0
    for _, _, _, dc, dv in _steps(groups, limit):
        if dc > left:
            return value + dv * left / dc
        left -= dc
        value += dv
    return value


def _steps(groups: Sequence[Sequence[Item]], limit: int) -> list[tuple[float, int, int, int, float]]:
    """(−density, group, option, cost step, value step) of every group's hull, densest first."""
    steps = []
    for g, options in enumerate(groups):
        hull = _hull([(o.cost, o.value, n) for n, o in enumerate(options) if o.cost <= limit and o.value > 0])
        prev_cost, prev_value = 0, 0.0
        for cost, value, n in hull:
            dc, dv = cost - prev_cost, value - prev_value
            steps.append((-(dv / dc) if dc > 0 else -math.inf, g, n, dc, dv))
            prev_cost, prev_value = cost, value
    steps.sort(key=lambda s: (s[0], s[1]))
    return steps


def _hull(points: list[tuple[int, float, int]]) -> list[tuple[int, float, int]]:
    """The options (cost, value, index) on the upper concave hull from (0, 0): each one gains
    more per byte than the next; dominated and below-hull options are dropped."""
    hull: list[tuple[int, float, int]] = []
    for p in sorted(points, key=lambda p: (p[0], -p[1], p[2])):
        if hull and p[1] <= hull[-1][1]:
            continue  # costs at least as much, worth no more
        while hull:
            c0, v0 = (hull[-2][0], hull[-2][1]) if len(hull) > 1 else (0, 0.0)
            c1, v1 = hull[-1][0], hull[-1][1]
            # drop the last point when it lies on or below the line from its predecessor to p
            if (v1 - v0) * (p[0] - c0) <= (p[1] - v0) * (c1 - c0):
                hull.pop()
            else:
                break
        hull.append(p)
    return hull
