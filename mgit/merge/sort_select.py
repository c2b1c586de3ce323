"""Which elements a comparison sort puts at positions [lo, hi), without sorting everything.

TIES and Breadcrumbs keep the elements mergekit's ``torch.argsort`` (libstdc++'s unstable
introsort) ranks in a range, so equal magnitudes land where its swaps put them. This replays only
the partitions that hold ``lo`` or ``hi`` (~2n steps, not n log n); ``sparsify`` checks once per
process that it matches the installed torch, and sorts otherwise. How: docs/merging.md, "Notes
from the code".
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np

BLOCK = 1 << 16  # elements scanned at a time: stop positions and masks stay in the caches
LEAF = 16  # libstdc++'s _S_threshold: shorter segments are left to the insertion sort


def depth_limit(n: int) -> int:
    """introsort's recursion budget before it falls back to heapsort: 2 floor(log2 n)."""
    return 2 * int(math.floor(math.log2(n))) if n > 1 else 0


def sorted_range(
    values: np.ndarray, lo: int, hi: int, descending: bool, depth: int | None = None, out: np.ndarray | None = None
) -> np.ndarray | None:
    """A bool mask over ``values``: the elements ``std::sort`` (ascending, or descending with
    ``a > b``) places at positions ``lo`` .. ``hi - 1``; None where introsort would use heapsort.

    ``values`` is a 1-D array compared as numbers (no NaN: the caller checks); it is permuted in
    place, and put back in its order when None is returned (the caller then sorts it). ``depth``
    overrides the recursion budget (tests); ``out``: the bool array to write the mask into."""
    n = len(values)
    if out is None:
        keep = np.zeros(n, dtype=bool)
    else:
        keep = out
        keep[:] = False
    lo, hi = max(0, lo), min(n, hi)
    if lo >= hi:
        return keep
    budget = depth_limit(n) if depth is None else depth
    if lo == 0 and hi == n:
        keep[:] = True
        return keep
    if n <= LEAF:
        _leaf(values, np.arange(n), lo, hi, descending, keep)
        return keep
    if budget == 0:
        return None
    plan = _plan_first(values, lo, hi, descending)
    open_sides = [(a, b) for a, b, role in plan.sides if role == "open"]
    if len(open_sides) == 1 and plan.swaps < NEST_BELOW * (open_sides[0][1] - open_sides[0][0]):
        return _nested(values, lo, hi, descending, keep, plan, budget)
    first = _first_partition(values, descending, keep, plan)
    # segments still holding an end of the range, each with where its elements came from
    todo = [(a, b, budget - 1, origin) for a, b, origin in first.open]
    while todo:
        start, stop, budget, origin = todo.pop()
        if stop <= lo or start >= hi:
            continue
        if lo <= start and stop <= hi:
            keep[origin] = True
            continue
        if stop - start <= LEAF:
            _leaf(values[start:stop], origin, lo - start, hi - start, descending, keep)
            continue
        if budget == 0:
            first.put_back(values)
            return None
        cut = start + _partition(values[start:stop], origin, descending)
        todo.append((start, cut, budget - 1, origin[: cut - start]))
        todo.append((cut, stop, budget - 1, origin[cut - start :]))
    return keep


class _FirstPartition:
    """The whole array's partition, done without a position per element: the 4 bytes each would
    take are most of this module's memory. Only a side that still holds an end of the range gets
    its elements' original positions (after the partition: half the array, or less); a side
    wholly inside or outside is marked in ``keep`` from the swaps as they happen.

    Positions and original indices differ by the swaps: the median's (0 with ``median``) and the
    partition's pairs. ``put_back`` undoes them all from the open sides' positions alone."""

    def __init__(self, n: int, median: int, cut: int) -> None:
        self.n, self.median, self.cut = n, median, cut
        self.open: list[tuple[int, int, np.ndarray]] = []

    def original(self, positions: np.ndarray) -> np.ndarray:
        """The original indices of the elements that sat at ``positions`` right after the median's
        swap (which exchanged positions 0 and ``median``), before the partition's pairs."""
        out = positions.copy()
        out[positions == 0] = self.median
        out[positions == self.median] = 0
        return out

    def put_back(self, values: np.ndarray) -> None:
        """Undo every swap made so far (introsort would heapsort: the caller sorts the original)."""
        before = np.empty_like(values)
        placed = np.zeros(self.n, dtype=bool)  # original indices of the elements in open sides
        for start, stop, origin in self.open:
            before[origin] = values[start:stop]
            placed[origin] = True
        if len(self.open) == 1:  # the other side is settled: its swapped elements pair with the open side's
            start, stop, _ = self.open[0]
            settled = (0, self.cut) if start == self.cut else (self.cut, self.n)
            here = np.arange(*settled)
            there = np.arange(start, stop)
            left_here = placed[self.original(here)]
            moved_out = here[left_here]  # their own elements went to the open side
            moved_in = there[~placed[self.original(there)]]  # their own elements came here
            stayed = here[~left_here]
            before[self.original(stayed)] = values[stayed]
            # the i-th swap pairs the i-th left stop from the left with the i-th right stop from the right
            if settled[0] == 0:
                before[self.original(moved_in[::-1])] = values[moved_out]
            else:
                before[self.original(moved_in)] = values[moved_out[::-1]]
        values[:] = before


def _swap(arr: np.ndarray, lpos: np.ndarray, rpos: np.ndarray) -> None:
    """Exchange ``arr`` at each pair of positions (disjoint pairs: a partition's swaps)."""
    held = arr[lpos]
    arr[lpos] = arr[rpos]
    arr[rpos] = held


def _partner(position: int, lpos: np.ndarray, rpos: np.ndarray, otherwise: int) -> int:
    """Where the element at ``position`` goes if this batch of swaps (``lpos`` rising, ``rpos``
    falling, pairwise) moves it, else ``otherwise``."""
    i = int(np.searchsorted(lpos, position))
    if i < len(lpos) and lpos[i] == position:
        return int(rpos[i])
    i = len(rpos) - 1 - int(np.searchsorted(rpos[::-1], position))
    if 0 <= i < len(rpos) and rpos[i] == position:
        return int(lpos[i])
    return otherwise


def _side(start: int, stop: int, lo: int, hi: int) -> str:
    if stop <= lo or start >= hi:
        return "out"
    return "in" if lo <= start and stop <= hi else "open"


@dataclass(frozen=True)
class _FirstPlan:
    """The whole array's partition before its swaps: where the median of three came from, how
    many swaps there are, the cut, and each side's role for [lo, hi) ("in", "out" or "open")."""

    median: int
    swaps: int
    cut: int
    sides: tuple[tuple[int, int, str], tuple[int, int, str]]


def _plan_first(values: np.ndarray, lo: int, hi: int, descending: bool) -> _FirstPlan:
    """Plan the whole array's partition (more than LEAF elements); the median-of-three's swap
    to the front is the only change made."""
    n = len(values)
    median = _median_index(values, descending)
    values[0], values[median] = values[median], values[0]
    swaps, cut = _swaps_and_cut(values[1:], values[0], not descending, descending)
    cut += 1
    return _FirstPlan(median, swaps, cut, ((0, cut, _side(0, cut, lo, hi)), (cut, n, _side(cut, n, lo, hi))))


# A lopsided first partition (a pivot near an end: common among bf16 magnitudes' ties) leaves one
# open side of nearly the whole array and makes few swaps. Below this many swaps per element of
# that side, it is not given original positions (4 bytes each) but ranked as an array of its own,
# its answer mapped back through the swaps (8 bytes each), since its own first partition then
# keeps positions for about half of it only.
NEST_BELOW = 0.25


def _nested(
    values: np.ndarray,
    lo: int,
    hi: int,
    descending: bool,
    keep: np.ndarray,
    plan: _FirstPlan,
    budget: int,
) -> np.ndarray | None:
    """The rest of :func:`sorted_range` after :func:`_plan_first` for one open side: the
    partition's swaps made and logged, the open side ranked in place by :func:`sorted_range`
    (into ``keep``'s slice), then ``keep`` taken from positions back to original indices by
    undoing the swaps, the partition's and then the median's, on it."""
    pivot, rest = values[0], values[1:]
    index = np.int32 if len(values) < 2**31 else np.int64
    pairs = []
    for rest_l, rest_r in _swap_pairs(rest, pivot, not descending, descending, plan.swaps):
        lpos, rpos = (rest_l + 1).astype(index), (rest_r + 1).astype(index)  # positions in values
        _swap(values, lpos, rpos)
        pairs.append((lpos, rpos))
    median = plan.median
    (a, b, _), (c, d, settled) = sorted(plan.sides, key=lambda side: side[2] != "open")
    if sorted_range(values[a:b], lo - a, hi - a, descending, depth=budget - 1, out=keep[a:b]) is None:
        for lpos, rpos in pairs:  # the open side is as the swaps left it: undo them
            _swap(values, lpos, rpos)
        values[0], values[median] = values[median], values[0]
        return None
    keep[c:d] = settled == "in"
    for lpos, rpos in pairs:  # the swaps are disjoint pairs: undone in any order
        _swap(keep, lpos, rpos)
    keep[0], keep[median] = keep[median], keep[0]
    return keep


def _first_partition(values: np.ndarray, descending: bool, keep: np.ndarray, plan: _FirstPlan) -> _FirstPartition:
    """:func:`_partition` of the whole array (more than LEAF elements) as :func:`_plan_first`
    planned it, keeping track of original positions only for the sides still open; marks a side
    inside [lo, hi) in ``keep``."""
    n = len(values)
    median, swaps, cut, sides = plan.median, plan.swaps, plan.cut, plan.sides
    pivot = values[0]
    rest = values[1:]
    left_upper, right_upper = not descending, descending
    index = np.int32 if n < 2**31 else np.int64
    origins = {a: np.arange(a, b, dtype=index) for a, b, role in sides if role == "open"}
    for a, b, role in sides:
        if role == "in":
            keep[a:b] = True
    median_now = median  # where the element the median's swap put at ``median`` ends up
    for rest_l, rest_r in _swap_pairs(rest, pivot, left_upper, right_upper, swaps):
        lpos, rpos = rest_l + 1, rest_r + 1  # positions in values, past the pivot
        median_now = _partner(median, lpos, rpos, median_now)
        _swap(values, lpos, rpos)
        if sides[0][2] == "in":
            keep[lpos] = False
            keep[rpos] = True
        elif sides[1][2] == "in":
            keep[rpos] = False
            keep[lpos] = True
        if 0 in origins:
            origins[0][lpos] = rpos
        if cut in origins:
            origins[cut][rpos - cut] = lpos
    keep[0], keep[median] = keep[median], keep[0]  # the median's swap, on what is marked so far
    first = _FirstPartition(n, median, cut)
    for a, b, _ in sides:
        if a in origins:
            origin = origins[a]
            if a <= median_now < b:
                origin[median_now - a] = 0
            if a == 0:
                origin[0] = median
            first.open.append((a, b, origin))
    return first


def _leaf(values: np.ndarray, origin: np.ndarray, lo: int, hi: int, descending: bool, keep: np.ndarray) -> None:
    """The insertion sort's share of a short segment: a stable sort, its positions [lo, hi) kept."""
    vals = values.tolist()
    # Python's sort is stable; descending by sorting on the negated values keeps equal ones in order
    order = sorted(range(len(vals)), key=(lambda i: -vals[i]) if descending else vals.__getitem__)
    for position, i in enumerate(order):
        if lo <= position < hi:
            keep[origin[i]] = True


def _before(a: object, b: object, descending: bool) -> bool:
    """The sort's comparison: ``a`` goes strictly before ``b``."""
    return bool(a > b) if descending else bool(a < b)  # type: ignore[operator]


def _median_index(values: np.ndarray, descending: bool) -> int:
    """Which of (first + 1, mid, last - 1) ``std::__move_median_to_first`` swaps to the front."""
    m = len(values)
    a, b, c = 1, m // 2, m - 1
    va, vb, vc = values[a], values[b], values[c]
    if _before(va, vb, descending):
        if _before(vb, vc, descending):
            return b
        return c if _before(va, vc, descending) else a
    if _before(va, vc, descending):
        return a
    return c if _before(vb, vc, descending) else b


def _median_to_first(values: np.ndarray, origin: np.ndarray, descending: bool) -> None:
    j = _median_index(values, descending)
    values[0], values[j] = values[j], values[0]
    origin[0], origin[j] = origin[j], origin[0]


def _stops(block: np.ndarray, pivot: object, upper: bool) -> np.ndarray:
    """Where a scan stops in ``block``: at elements >= the pivot (``upper``) or <= it."""
    return block >= pivot if upper else block <= pivot


class _StopStream:
    """The positions a scan stops at, in its order (left to right, or right to left), in batches.
    Found block by block from values no swap has touched yet: a scan only reaches a position
    before any swap writes there."""

    def __init__(self, values: np.ndarray, pivot: object, upper: bool, from_left: bool) -> None:
        self.values, self.pivot, self.upper = values, pivot, upper
        starts = range(0, len(values), BLOCK)
        self.blocks: Iterator[int] = iter(starts if from_left else reversed(starts))
        self.from_left = from_left
        self.pending = np.empty(0, dtype=np.intp)

    def take(self, count: int) -> np.ndarray:
        parts, have = [], 0
        while have < count:
            if not len(self.pending):
                start = next(self.blocks)
                found = np.flatnonzero(_stops(self.values[start : start + BLOCK], self.pivot, self.upper))
                found += start
                self.pending = found if self.from_left else found[::-1]
            part = self.pending[: count - have]
            self.pending = self.pending[len(part) :]
            parts.append(part)
            have += len(part)
        return parts[0] if len(parts) == 1 else np.concatenate(parts)


def _partition(values: np.ndarray, origin: np.ndarray, descending: bool) -> int:
    """``std::__unguarded_partition_pivot`` on the whole segment (more than LEAF elements): the
    same swaps, in place, ``origin`` swapped alike; returns the cut (the right part's first position)."""
    _median_to_first(values, origin, descending)
    pivot = values[0]
    rest, rest_origin = values[1:], origin[1:]
    left_upper, right_upper = not descending, descending
    swaps, cut = _swaps_and_cut(rest, pivot, left_upper, right_upper)
    for lpos, rpos in _swap_pairs(rest, pivot, left_upper, right_upper, swaps):
        for arr in (rest, rest_origin):
            _swap(arr, lpos, rpos)
    return 1 + cut


def _swap_pairs(
    values: np.ndarray, pivot: object, left_upper: bool, right_upper: bool, swaps: int
) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """The partition's swaps in batches: the i-th left stop (rising) with the i-th right stop (falling)."""
    left = _StopStream(values, pivot, left_upper, from_left=True)
    right = _StopStream(values, pivot, right_upper, from_left=False)
    for done in range(0, swaps, BLOCK):
        lpos = left.take(min(BLOCK, swaps - done))
        yield lpos, right.take(len(lpos))


def _swaps_and_cut(values: np.ndarray, pivot: object, left_upper: bool, right_upper: bool) -> tuple[int, int]:
    """How many swaps the partition of ``values`` (the segment after its pivot) makes, and where
    its scans meet (the cut, in ``values``).

    The left scan stops where an element is not before the pivot, the right scan where the pivot
    is not before it. The i-th left stop L_i swaps with the i-th right stop R_i while L_i < R_i,
    so the count s is the most x at which at least x left stops lie before a position and x right
    stops at or after it: max over positions of min(left stops before, right stops from). The
    scans then meet at L_s or at R_(s-1), whichever comes first (the left scan stops on the
    element the last swap put there)."""
    n = len(values)
    starts = range(0, n, BLOCK)
    per_left = np.array([np.count_nonzero(_stops(values[i : i + BLOCK], pivot, left_upper)) for i in starts])
    per_right = np.array([np.count_nonzero(_stops(values[i : i + BLOCK], pivot, right_upper)) for i in starts])
    before = np.concatenate(([0], np.cumsum(per_left)))  # left stops before each block's start
    after = np.concatenate((np.cumsum(per_right[::-1])[::-1], [0]))  # right stops from each block's start on
    # min(before, after) rises then falls: its peak is in the block where before overtakes after
    b = int(np.clip(np.searchsorted(before - after, 0, side="right") - 1, 0, len(starts) - 1))
    block = values[starts[b] : starts[b] + BLOCK]
    left_in = np.concatenate(([0], np.cumsum(_stops(block, pivot, left_upper)))) + before[b]
    right_in = np.concatenate((np.cumsum(_stops(block, pivot, right_upper)[::-1])[::-1], [0])) + after[b + 1]
    swaps = int(np.minimum(left_in, right_in).max())
    next_left = _nth_stop(values, pivot, left_upper, before, swaps) if before[-1] > swaps else n
    last_right = _nth_stop(values, pivot, right_upper, after, swaps - 1, from_right=True) if swaps else n
    return swaps, min(next_left, last_right)


def _nth_stop(
    values: np.ndarray, pivot: object, upper: bool, counts: np.ndarray, i: int, from_right: bool = False
) -> int:
    """The position of a scan's i-th stop (from 0), given the stops before each block's start
    (from the left) or from each block's start on (from the right)."""
    if from_right:  # counts[b]: stops at or after block b's start, falling
        b = int(np.searchsorted(-counts, -i, side="left")) - 1  # the block with counts[b + 1] <= i < counts[b]
        found = np.flatnonzero(_stops(values[b * BLOCK : (b + 1) * BLOCK], pivot, upper))
        return b * BLOCK + int(found[len(found) - 1 - (i - counts[b + 1])])
    b = int(np.searchsorted(counts, i, side="right")) - 1  # the block with counts[b] <= i < counts[b + 1]
    found = np.flatnonzero(_stops(values[b * BLOCK : (b + 1) * BLOCK], pivot, upper))
    return b * BLOCK + int(found[i - counts[b]])
