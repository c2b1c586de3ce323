"""Which elements a comparison sort puts at positions [lo, hi), without sorting everything.

TIES and Breadcrumbs keep the elements a sort of |delta| ranks in a range of positions, and
mergekit's ranking is ``torch.argsort`` on the CPU: libstdc++'s ``std::sort`` (introsort), which is
not stable, so among equal magnitudes (common in bf16) *which* ones land inside the range is
decided by the algorithm's swaps. Reproducing mergekit bit for bit means reproducing those.

A full sort costs ~100 ns and 18 bytes per element on a 65M-element embedding; the range needs
far less. Introsort partitions a segment around a pivot, then works on both halves; a half lying
wholly inside or outside [lo, hi) is settled whatever happens inside it later (later steps only
move elements within their segment, and the final insertion sort never moves one past a segment
boundary, since earlier segments hold no element that compares after a later one). So only the
segments holding ``lo`` or ``hi`` are partitioned further: about 2n element steps instead of
n log n, vectorised with numpy, plus 4 bytes per element for the original positions.

Each partition does exactly what ``std::__unguarded_partition_pivot`` does: the median of
(first + 1, middle, last - 1) is swapped to the front, then two scans stop at elements not
strictly before / after the pivot, and the i-th stop from the left swaps with the i-th stop from
the right until they cross. The stops are found from the original values block by block, their
crossing from per-block counts. Segments of at most 16 elements are left for the final insertion
sort, which is stable within them. When introsort would switch to heapsort (recursion deeper than
2 log2 n) this returns None and the caller sorts. ``sparsify`` checks once per process that this
reproduces the torch it runs with, and sorts otherwise.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

BLOCK = 1 << 16  # elements scanned at a time: stop positions and masks stay in the caches
LEAF = 16  # libstdc++'s _S_threshold: shorter segments are left to the insertion sort


def depth_limit(n: int) -> int:
    """introsort's recursion budget before it falls back to heapsort: 2 floor(log2 n)."""
    return 2 * int(math.floor(math.log2(n))) if n > 1 else 0


def sorted_range(values: np.ndarray, lo: int, hi: int, descending: bool, depth: int | None = None) -> np.ndarray | None:
    """A bool mask over ``values``: the elements ``std::sort`` (ascending, or descending with
    ``a > b``) places at positions ``lo`` .. ``hi - 1``; None where introsort would use heapsort.

    ``values`` is a 1-D array compared as numbers (no NaN: the caller checks); it is permuted in
    place, and put back in its order when None is returned (the caller then sorts it). ``depth``
    overrides the recursion budget (tests)."""
    n = len(values)
    keep = np.zeros(n, dtype=bool)
    lo, hi = max(0, lo), min(n, hi)
    if lo >= hi:
        return keep
    origin = np.arange(n, dtype=np.int32 if n < 2**31 else np.int64)  # where each element came from
    todo = [(0, n, depth_limit(n) if depth is None else depth)]
    while todo:
        first, last, budget = todo.pop()
        if last <= lo or first >= hi:
            continue
        if lo <= first and last <= hi:
            keep[origin[first:last]] = True
            continue
        if last - first <= LEAF:
            _leaf(values[first:last], origin[first:last], lo - first, hi - first, descending, keep)
            continue
        if budget == 0:
            values[origin] = values.copy()  # undo every swap
            return None
        cut = first + _partition(values[first:last], origin[first:last], descending)
        todo.append((first, cut, budget - 1))
        todo.append((cut, last, budget - 1))
    return keep


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


def _median_to_first(values: np.ndarray, origin: np.ndarray, descending: bool) -> None:
    """``std::__move_median_to_first(first, first + 1, mid, last - 1)``."""
    m = len(values)
    a, b, c = 1, m // 2, m - 1
    va, vb, vc = values[a], values[b], values[c]
    if _before(va, vb, descending):
        if _before(vb, vc, descending):
            j = b
        elif _before(va, vc, descending):
            j = c
        else:
            j = a
    elif _before(va, vc, descending):
        j = a
    elif _before(vb, vc, descending):
        j = c
    else:
        j = b
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
    same swaps, in place; returns the cut (the right part's first position)."""
    _median_to_first(values, origin, descending)
    pivot = values[0]
    rest, rest_origin = values[1:], origin[1:]
    # the left scan stops where an element is not before the pivot, the right scan where the pivot is not before it
    left_upper, right_upper = not descending, descending
    s, total_left = _swap_count(rest, pivot, left_upper, right_upper)
    left = _StopStream(rest, pivot, left_upper, from_left=True)
    right = _StopStream(rest, pivot, right_upper, from_left=False)
    last_right = len(rest)
    for done in range(0, s, BLOCK):
        lpos = left.take(min(BLOCK, s - done))
        rpos = right.take(len(lpos))
        for arr in (rest, rest_origin):
            held = arr[lpos]
            arr[lpos] = arr[rpos]
            arr[rpos] = held
        last_right = int(rpos[-1])
    # the scans' last meeting: the next left stop, or the last right stop's position, whichever is first
    next_left = int(left.take(1)[0]) if total_left > s else len(rest)
    return 1 + min(next_left, last_right)


def _swap_count(values: np.ndarray, pivot: object, left_upper: bool, right_upper: bool) -> tuple[int, int]:
    """How many swaps the partition makes, and how many left stops there are in all.

    The i-th left stop L_i swaps with the i-th right stop R_i while L_i < R_i, so the count is the
    most x at which at least x left stops lie before a position and x right stops at or after it:
    max over positions of min(left stops before, right stops from)."""
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
    return int(np.minimum(left_in, right_in).max()), int(before[-1])
