"""Three-way merges of text files (config.json, tokenizer files, READMEs) line by line, as git
merges them: the diff3 algorithm over the standard library's difflib. (The maintained Python
implementation, merge3, is GPL-2.0-or-later; mgit is Apache-2.0.)
A file is text when it is UTF-8 without a NUL byte; anything else both sides changed is a
binary conflict."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher

from mgit.merge.threeway.conflicts import Side


def is_text(data: bytes) -> bool:
    if b"\0" in data:
        return False
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def merge_text(base: bytes, ours: bytes, theirs: bytes, side: Side | None = None) -> bytes | None:
    """The merged text, or None when both sides changed the same lines (a conflict) and no
    ``side`` was chosen for such hunks (``side``: take that side's lines there, git's ``-X``)."""
    merged: list[bytes] = []
    for hunk in diff3(base.splitlines(True), ours.splitlines(True), theirs.splitlines(True)):
        if hunk.conflict:
            if side is None:
                return None
            merged += hunk.ours if side == "ours" else hunk.theirs
        else:
            merged += hunk.ours
    return b"".join(merged)


@dataclass(frozen=True)
class Hunk:
    """A stretch of the merge: lines both sides agree on (``ours`` holds them), or a conflict."""

    ours: Sequence[bytes]
    theirs: Sequence[bytes]
    conflict: bool = False


def diff3(base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]) -> Iterator[Hunk]:
    """diff3 (Khanna, Kunal and Pierce, "A Formal Investigation of Diff3"): between the stretches
    of base that both sides kept (sync regions), a side that left base's lines alone yields to
    the other; both sides writing the same lines agree; different lines are a conflict."""
    i_base = i_ours = i_theirs = 0
    for base_at, base_end, ours_at, theirs_at in _sync_regions(base, ours, theirs):
        old, mine, other = base[i_base:base_at], ours[i_ours:ours_at], theirs[i_theirs:theirs_at]
        if old or mine or other:
            if mine == other or other == old:
                yield Hunk(mine, mine)
            elif mine == old:
                yield Hunk(other, other)
            else:
                yield Hunk(mine, other, conflict=True)
        n = base_end - base_at
        if n:
            yield Hunk(ours[ours_at : ours_at + n], ours[ours_at : ours_at + n])
        i_base, i_ours, i_theirs = base_end, ours_at + n, theirs_at + n


def _sync_regions(
    base: Sequence[bytes], ours: Sequence[bytes], theirs: Sequence[bytes]
) -> Iterator[tuple[int, int, int, int]]:
    """(base start, base end, ours start, theirs start) of each stretch of base lines matched in
    both sides, in order, ending with an empty one at the three ends."""
    matches_ours = SequenceMatcher(None, base, ours, autojunk=False).get_matching_blocks()
    matches_theirs = SequenceMatcher(None, base, theirs, autojunk=False).get_matching_blocks()
    i = j = 0
    while i < len(matches_ours) and j < len(matches_theirs):
        a, b = matches_ours[i], matches_theirs[j]
        start, end = max(a.a, b.a), min(a.a + a.size, b.a + b.size)
        if start < end:
            yield start, end, a.b + (start - a.a), b.b + (start - b.a)
        if a.a + a.size < b.a + b.size:  # the one that ends first can match nothing further
            i += 1
        else:
            j += 1
    yield len(base), len(base), len(ours), len(theirs)
