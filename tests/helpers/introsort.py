"""A plain-Python libstdc++ ``std::sort`` (introsort) returning the permutation, for small inputs.

The reference sort_select is tested against besides torch itself: whether torch's CPU argsort
*is* this algorithm decides if sort_select's tests apply to the torch installed (they are skipped
otherwise, and fail, not skip, when sort_select breaks).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

THRESHOLD = 16  # _S_threshold


def introsort_order(values: Sequence[float], descending: bool) -> list[int]:  # noqa: C901 (libstdc++'s introsort, kept line for line with the C++)
    """The order ``std::sort`` leaves (value, index) pairs in, comparing values only."""
    v, ix = list(values), list(range(len(values)))
    before: Callable[[float, float], bool] = (lambda a, b: a > b) if descending else (lambda a, b: a < b)

    def swap(i: int, j: int) -> None:
        v[i], v[j] = v[j], v[i]
        ix[i], ix[j] = ix[j], ix[i]

    def median_to_first(result: int, a: int, b: int, c: int) -> None:
        if before(v[a], v[b]):
            if before(v[b], v[c]):
                swap(result, b)
            elif before(v[a], v[c]):
                swap(result, c)
            else:
                swap(result, a)
        elif before(v[a], v[c]):
            swap(result, a)
        elif before(v[b], v[c]):
            swap(result, c)
        else:
            swap(result, b)

    def partition(first: int, last: int, pivot: int) -> int:
        while True:
            while before(v[first], v[pivot]):
                first += 1
            last -= 1
            while before(v[pivot], v[last]):
                last -= 1
            if not first < last:
                return first
            swap(first, last)
            first += 1

    def loop(first: int, last: int, depth: int) -> None:
        while last - first > THRESHOLD:
            if depth == 0:
                raise NotImplementedError("heapsort fallback: not needed for the probes")
            depth -= 1
            median_to_first(first, first + 1, first + (last - first) // 2, last - 1)
            cut = partition(first + 1, last, first)
            loop(cut, last, depth)
            last = cut

    def insert(i: int, guarded_from: int | None) -> None:
        val, idx = v[i], ix[i]
        if guarded_from is not None and before(val, v[guarded_from]):
            v[guarded_from + 1 : i + 1], ix[guarded_from + 1 : i + 1] = v[guarded_from:i], ix[guarded_from:i]
            v[guarded_from], ix[guarded_from] = val, idx
            return
        j = i
        while before(val, v[j - 1]):
            v[j], ix[j] = v[j - 1], ix[j - 1]
            j -= 1
        v[j], ix[j] = val, idx

    n = len(v)
    if n > 1:
        loop(0, n, 2 * int(math.floor(math.log2(n))))
        for i in range(1, min(n, THRESHOLD)):
            insert(i, 0)
        for i in range(THRESHOLD, n):
            insert(i, None)
    return ix
