"""A minimal line diff, as git's merge diffs each side against the base: Myers' O(ND) algorithm with
its linear-space middle snake, each run of changed lines slid to one canonical place as git's
xdiff slides it.

The search is bounded: a stretch needing more than ``MAX_COST`` edits is split at unique lines
(as patience diff) or changed whole. Details: docs/merging.md, "Notes from the code".
"""

from __future__ import annotations

import bisect
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

MAX_COST = 256  # edits searched for on one stretch's shortest path before it is split at anchors


@dataclass(frozen=True)
class Change:
    """Lines ``[a, a + a_len)`` of the old file replaced by ``[b, b + b_len)`` of the new one."""

    a: int
    a_len: int
    b: int
    b_len: int


def line_ids(lines: Sequence[bytes], table: dict[bytes, int]) -> list[int]:
    """Each line's id in ``table`` (new lines are added): equal lines, equal ids."""
    return [table.setdefault(line, len(table)) for line in lines]


def diff(a: Sequence[int], b: Sequence[int]) -> list[Change]:
    """The changes turning ``a`` into ``b``, in order, none touching another."""
    changed_a, changed_b = [False] * len(a), [False] * len(b)
    _mark(a, b, changed_a, changed_b)
    _compact(a, changed_a, changed_b)
    _compact(b, changed_b, changed_a)
    return _script(changed_a, changed_b)


def _mark(a: Sequence[int], b: Sequence[int], changed_a: list[bool], changed_b: list[bool]) -> None:
    """Mark the lines of a minimal diff changed (lines neither file shares first, then Myers on
    what is left, stretch by stretch, with an explicit stack)."""
    in_b, in_a = set(b), set(a)
    keep_a = [i for i, x in enumerate(a) if x in in_b]
    keep_b = [j for j, y in enumerate(b) if y in in_a]
    for i, x in enumerate(a):
        changed_a[i] = x not in in_b
    for j, y in enumerate(b):
        changed_b[j] = y not in in_a
    ra, rb = [a[i] for i in keep_a], [b[j] for j in keep_b]
    marks_a, marks_b = [False] * len(ra), [False] * len(rb)
    todo = [(0, len(ra), 0, len(rb))]
    while todo:
        lo_a, hi_a, lo_b, hi_b = todo.pop()
        n = _common(ra, rb, lo_a, lo_b, min(hi_a - lo_a, hi_b - lo_b))
        lo_a, lo_b = lo_a + n, lo_b + n
        n = _common(ra, rb, hi_a - 1, hi_b - 1, min(hi_a - lo_a, hi_b - lo_b), back=True)
        hi_a, hi_b = hi_a - n, hi_b - n
        split = _middle_snake(ra, rb, lo_a, hi_a, lo_b, hi_b) if lo_a < hi_a and lo_b < hi_b else None
        if split is not None:
            x, y, u, v = split
            todo += [(u, hi_a, v, hi_b), (lo_a, x, lo_b, y)]
            continue
        anchors = _anchors(ra, rb, lo_a, hi_a, lo_b, hi_b) if lo_a < hi_a and lo_b < hi_b else []
        if not anchors:  # one side empty, or too costly with nothing to hold on to: all changed
            marks_a[lo_a:hi_a] = [True] * (hi_a - lo_a)
            marks_b[lo_b:hi_b] = [True] * (hi_b - lo_b)
            continue
        for (i, j), (end_i, end_j) in zip([(lo_a - 1, lo_b - 1), *anchors], [*anchors, (hi_a, hi_b)], strict=True):
            todo.append((i + 1, end_i, j + 1, end_j))
    for k, i in enumerate(keep_a):
        changed_a[i] = marks_a[k]
    for k, j in enumerate(keep_b):
        changed_b[j] = marks_b[k]


def _anchors(a: Sequence[int], b: Sequence[int], lo_a: int, hi_a: int, lo_b: int, hi_b: int) -> list[tuple[int, int]]:
    """Where a stretch too costly for Myers is split (as patience diff splits a file): the lines
    found once in each file's stretch, the longest run of them in the same order in both."""
    count_a, count_b = Counter(a[lo_a:hi_a]), Counter(b[lo_b:hi_b])
    at_b = {y: j for j, y in enumerate(b[lo_b:hi_b], lo_b) if count_b[y] == 1}
    pairs = [(i, at_b[x]) for i, x in enumerate(a[lo_a:hi_a], lo_a) if count_a[x] == 1 and x in at_b]
    tails: list[int] = []  # tails[n]: the pair ending the best increasing run of n + 1 found so far
    tail_js: list[int] = []  # and its line in b
    before: list[int] = []  # each pair's predecessor in its run
    for k, (_, j) in enumerate(pairs):
        n = bisect.bisect_left(tail_js, j)
        before.append(tails[n - 1] if n else -1)
        if n == len(tails):
            tails.append(k)
            tail_js.append(j)
        else:
            tails[n], tail_js[n] = k, j
    run, k = [], tails[-1] if tails else -1
    while k != -1:
        run.append(pairs[k])
        k = before[k]
    return run[::-1]


def _common(a: Sequence[int], b: Sequence[int], i: int, j: int, most: int, back: bool = False) -> int:
    """How many lines from ``a[i]`` and ``b[j]`` on (``back``: backwards) are equal, at most
    ``most``: compared in slices that double while they match, so a long stretch costs a few
    C-level comparisons."""
    n, step = 0, 1
    while n < most:
        step = min(step, most - n)
        if back:
            same = a[i - n - step + 1 : i - n + 1] == b[j - n - step + 1 : j - n + 1]
        else:
            same = a[i + n : i + n + step] == b[j + n : j + n + step]
        if same:
            n += step
            step *= 2
        elif step > 1:
            step //= 2
        else:
            break
    return n


def _middle_snake(  # noqa: C901 (Myers' middle snake, kept as xdiff writes it)
    a: Sequence[int], b: Sequence[int], lo_a: int, hi_a: int, lo_b: int, hi_b: int
) -> tuple[int, int, int, int] | None:
    """The middle snake of a shortest edit path from (lo_a, lo_b) to (hi_a, hi_b), searched from
    both ends at once: the stretch ``(x, y)`` → ``(u, v)`` of equal lines it passes through, or
    None past ``MAX_COST`` edits. Diagonal k holds the points with x - y = k (relative)."""
    n, m = hi_a - lo_a, hi_b - lo_b
    delta, most = n - m, min((n + m + 1) // 2, MAX_COST)
    offset = most + 1
    forward, backward = [-1] * (2 * offset + 1), [-1] * (2 * offset + 1)
    forward[offset + 1] = backward[offset + 1] = 0
    odd = delta % 2 != 0
    f_lo = f_hi = b_lo = b_hi = 0  # diagonals that ran off the grid are not searched again
    for d in range(most + 1):
        for k in range(d - f_hi, -d + f_lo - 1, -2):  # as xdiff: diagonals right to left
            at = offset + k
            x = forward[at + 1] if k == -d or (k != d and forward[at - 1] < forward[at + 1]) else forward[at - 1] + 1
            y = x - k
            start = x
            if x < n and y < m and a[lo_a + x] == b[lo_b + y]:
                x += _common(a, b, lo_a + x, lo_b + y, min(n - x, m - y))
            forward[at] = x
            if x > n:
                f_hi += 2
            elif x - k > m:
                f_lo += 2
            elif odd and 0 <= offset + delta - k < len(backward) and backward[offset + delta - k] != -1:
                if x >= n - backward[offset + delta - k]:
                    return lo_a + start, lo_b + start - k, lo_a + x, lo_b + x - k
        for k in range(-d + b_lo, d + 1 - b_hi, 2):  # here reversed: the same order
            at = offset + k
            x = (
                backward[at + 1]
                if k == -d or (k != d and backward[at - 1] < backward[at + 1])
                else backward[at - 1] + 1
            )
            y = x - k
            start = x
            if x < n and y < m and a[hi_a - 1 - x] == b[hi_b - 1 - y]:
                x += _common(a, b, hi_a - 1 - x, hi_b - 1 - y, min(n - x, m - y), back=True)
            backward[at] = x
            if x > n:
                b_hi += 2
            elif x - k > m:
                b_lo += 2
            elif not odd and 0 <= offset + delta - k < len(forward) and forward[offset + delta - k] != -1:
                fx = forward[offset + delta - k]
                if fx >= n - x:
                    return lo_a + n - x, lo_b + m - (x - k), lo_a + n - start, lo_b + m - (start - k)
    return None


def _compact(lines: Sequence[int], changed: list[bool], other: list[bool]) -> None:
    """Slide each run of changed lines of one file to its canonical place: as far down as it
    goes, or the lowest place where it lies against a run of changed lines of the other file
    (the two then read as one replacement). Runs that meet on the way join."""
    n = len(lines)
    gaps = _other_gaps(other)  # gaps[u]: the other file changes lines right after its u-th unchanged line
    start = kept = 0  # kept: unchanged lines before ``start``
    while start < n:
        if not changed[start]:
            start, kept = start + 1, kept + 1
            continue
        end = _run_end(changed, start)
        while True:
            size = end - start
            while start > 0 and lines[start - 1] == lines[end - 1]:  # up as far as it goes
                start, end, kept = start - 1, end - 1, kept - 1
                changed[start], changed[end] = True, False
                while start > 0 and changed[start - 1]:  # joining the run above
                    start -= 1
            aligned = end if gaps[kept] else -1
            while end < n and lines[start] == lines[end]:  # then down as far as it goes
                changed[start], changed[end] = False, True
                start, end, kept = start + 1, _run_end(changed, end + 1), kept + 1
                if gaps[kept]:
                    aligned = end
            if end - start == size:
                break
        while aligned != -1 and end > aligned:  # back up to the last place beside the other's change
            start, end, kept = start - 1, end - 1, kept - 1
            changed[start], changed[end] = True, False
        start = end


def _run_end(changed: list[bool], at: int) -> int:
    while at < len(changed) and changed[at]:
        at += 1
    return at


def _other_gaps(changed: list[bool]) -> list[bool]:
    """For each gap between the unchanged lines of a file (before the first, between each two,
    after the last): whether changed lines fill it."""
    gaps, run = [], False
    for c in changed:
        if c:
            run = True
        else:
            gaps.append(run)
            run = False
    gaps.append(run)
    return gaps


def _script(changed_a: list[bool], changed_b: list[bool]) -> list[Change]:
    out, i, j = [], 0, 0
    n, m = len(changed_a), len(changed_b)
    while i < n or j < m:
        if i < n and j < m and not changed_a[i] and not changed_b[j]:
            i, j = i + 1, j + 1
            continue
        i0, j0 = i, j
        while i < n and changed_a[i]:
            i += 1
        while j < m and changed_b[j]:
            j += 1
        out.append(Change(i0, i - i0, j0, j - j0))
    return out
