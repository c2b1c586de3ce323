"""Three-way merges of text files (config.json, tokenizer files, READMEs) line by line, as
``git merge-file`` merges them: each side diffed against the base with a minimal line diff
(:mod:`~mgit.merge.threeway.linediff`, Myers' algorithm, as git's xdiff), then the two lists
of changes walked together. A change only one side made is taken; the same change made on both
sides is taken once; changes of the two sides that overlap *or touch* (no unchanged line
between them) are a conflict, unless the two sides' lines there end up the same. (The
maintained Python implementation of diff3, merge3, is GPL-2.0-or-later; mgit is Apache-2.0.)
A file is text when it is UTF-8 without a NUL byte; anything else both sides changed is a
binary conflict."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from mgit.merge.threeway.conflicts import Side
from mgit.merge.threeway.linediff import Change, diff, line_ids


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
    table: dict[bytes, int] = {}
    base_ids, ours_ids, theirs_ids = (line_ids(text.splitlines(True), table) for text in (base, ours, theirs))
    merged = merge_lines(base_ids, ours_ids, theirs_ids, side)
    if merged is None:
        return None
    lines = list(table)  # id → line: a dict keeps its insertion order
    return b"".join(lines[i] for i in merged)


@dataclass
class Hunk:
    """A stretch where a side changed the base: ``[base, base + base_len)`` of the base is
    ``[ours, ours + ours_len)`` of ours and ``[theirs, theirs + theirs_len)`` of theirs; ``take``
    is "ours", "theirs" or None (a conflict)."""

    take: Side | None
    base: int
    base_len: int
    ours: int
    ours_len: int
    theirs: int
    theirs_len: int


def merge_lines(base: Sequence[int], ours: Sequence[int], theirs: Sequence[int], side: Side | None) -> list[int] | None:
    """The merged lines (ids), or None on a conflict where no ``side`` was chosen."""
    mine, other = diff(base, ours), diff(base, theirs)
    if not mine:
        return list(theirs)
    if not other:
        return list(ours)
    out: list[int] = []
    at = 0  # in ours: what is before it is written
    for h in hunks(mine, other, ours, theirs, len(base)):
        take = h.take
        if (
            take is None
            and h.ours_len
            and h.theirs_len
            and _lines(ours, h.ours, h.ours_len) == _lines(theirs, h.theirs, h.theirs_len)
        ):
            take = "ours"  # both sides end up with the same lines there
        if take is None:
            if side is None:
                return None
            take = side
        out += ours[at : h.ours]
        out += _lines(ours, h.ours, h.ours_len) if take == "ours" else _lines(theirs, h.theirs, h.theirs_len)
        at = h.ours + h.ours_len
    out += ours[at:]
    return out


def _lines(lines: Sequence[int], start: int, n: int) -> list[int]:
    return list(lines[start : start + n])


def hunks(
    mine: list[Change], other: list[Change], ours: Sequence[int], theirs: Sequence[int], base_len: int
) -> list[Hunk]:
    """The changes of ours (``mine``) and theirs (``other``) against the base, in base order, as
    hunks: each taken from the side that made it, the same change made on both sides not at all
    (ours' lines stand there already), and changes that overlap or touch one conflict."""
    out: list[Hunk] = []
    i = j = 0
    while i < len(mine) and j < len(other):
        x, y = mine[i], other[j]
        if x.a + x.a_len < y.a:  # ours' change ends before theirs' starts, a line apart at least
            _add(out, Hunk("ours", x.a, x.a_len, x.b, x.b_len, x.a + y.b - y.a, x.a_len))
            i += 1
            continue
        if y.a + y.a_len < x.a:
            _add(out, Hunk("theirs", y.a, y.a_len, y.a + x.b - x.a, y.a_len, y.b, y.b_len))
            j += 1
            continue
        same = (x.a, x.a_len) == (y.a, y.a_len) and _lines(ours, x.b, x.b_len) == _lines(theirs, y.b, y.b_len)
        if not same:
            _add(out, _conflict(x, y))
        ends_x, ends_y = x.a + x.a_len, y.a + y.a_len
        i += ends_x <= ends_y
        j += ends_y <= ends_x
    for x in mine[i:]:
        _add(out, Hunk("ours", x.a, x.a_len, x.b, x.b_len, x.a + len(theirs) - base_len, x.a_len))
    for y in other[j:]:
        _add(out, Hunk("theirs", y.a, y.a_len, y.a + len(ours) - base_len, y.a_len, y.b, y.b_len))
    return out


def _conflict(x: Change, y: Change) -> Hunk:
    """Ours' change ``x`` and theirs' ``y``, which overlap or touch, as one conflict: the base
    lines either covers, and each side's lines there (its change, and the base's lines around
    it that it left alone)."""
    start, end = min(x.a, y.a), max(x.a + x.a_len, y.a + y.a_len)
    ours = x.b - (x.a - start)
    theirs = y.b - (y.a - start)
    ours_len = x.b + x.b_len + (end - x.a - x.a_len) - ours
    theirs_len = y.b + y.b_len + (end - y.a - y.a_len) - theirs
    return Hunk(None, start, end - start, ours, ours_len, theirs, theirs_len)


def _add(out: list[Hunk], h: Hunk) -> None:
    """Append ``h``, joined to the last hunk where the two overlap or touch on either side (taken
    from different sides, the two are a conflict)."""
    last = out[-1] if out else None
    if last is None or (h.ours > last.ours + last.ours_len and h.theirs > last.theirs + last.theirs_len):
        out.append(h)
        return
    if h.take != last.take:
        last.take = None
    last.base_len = h.base + h.base_len - last.base
    last.ours_len = h.ours + h.ours_len - last.ours
    last.theirs_len = h.theirs + h.theirs_len - last.theirs
