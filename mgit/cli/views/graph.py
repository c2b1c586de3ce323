"""`log --graph`: commits on lanes, an edge from each commit to each of its parents, lanes assigned
as `git log --graph` assigns them, glyphs mgit's own (every row reads one way only).

Rows are pure functions of the commit order and the parents: nothing here reads a repository.
The lane rules and the glyphs: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field


@dataclass
class CommitRows:
    """The rows one commit adds: ``before`` (lanes making room for a wide merge), ``commit``
    (its own row), ``after`` (its edges reaching their lanes) and ``padding`` (the lanes, for
    any further text line)."""

    before: list[str]
    commit: str
    after: list[str]
    padding: str

    def lines(self, text: Sequence[str]) -> list[str]:
        """``text`` beside the rows: the first line on the commit row, the rest on the rows
        after it, then on padding rows; every row of the commit padded to one width, as git."""
        rows = [self.commit, *self.after]
        rows += [self.padding] * (len(text) - len(rows))
        width = max(len(r) for r in [*self.before, *rows])
        out = [r.rstrip() for r in self.before]
        for k, row in enumerate(rows):
            out.append(f"{row.ljust(width)} {text[k]}".rstrip() if k < len(text) else row.rstrip())
        return out


def _row(cells: dict[int, str]) -> str:
    width = max(cells, default=-1) + 1
    return "".join(cells.get(x, " ") for x in range(width))


def _unique(items: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass
class Lanes:
    """The lanes between one commit and the next; :meth:`place` draws a commit and moves on."""

    waiting: list[str] = field(default_factory=list)  # lane k waits for commit waiting[k]
    ended: int | None = None  # the lane of the last commit, when it had no parent to draw

    def place(self, commit: str, parents: Sequence[str]) -> CommitRows:
        lanes = self.waiting if commit in self.waiting else [*self.waiting, commit]
        i = lanes.index(commit)
        right = len(lanes) - i - 1  # lanes to the commit's right
        drawn = _unique(parents)
        extra = max(len(drawn) - 2, 0)  # a wide merge's edges leaving from its dashes
        before = [self._make_room(i, right, step) for step in range(extra if right else 0)]
        if commit not in self.waiting and self.ended == i:  # right under a root: not its parent
            before.insert(0, _row({2 * k: "|" for k in range(len(self.waiting))}))
        self.ended = None if drawn else i
        commit_row = self._commit_row(i, extra, right)
        after = [self._fan_out(i, extra, right)] if len(drawn) > 1 else []
        if not drawn and right:  # a root: the lanes on its right close up
            after.append(_row({2 * k: "|" for k in range(i)} | {2 * k - 1: "/" for k in range(i + 1, i + 1 + right)}))
        expanded = [*lanes[:i], *drawn, *lanes[i + 1 :]]
        self.waiting = _unique(expanded)
        after += self._collapse([self.waiting.index(c) for c in expanded])
        return CommitRows(before, commit_row, after, _row({2 * k: "|" for k in range(len(self.waiting))}))

    @staticmethod
    def _make_room(i: int, right: int, step: int) -> str:
        """One row moving the lanes right of a wide merge one lane further right."""
        cells = {2 * k: "|" for k in range(i + 1)}
        cells.update({2 * (k + step) + 1: "\\" for k in range(i + 1, i + 1 + right)})
        return _row(cells)

    @staticmethod
    def _commit_row(i: int, extra: int, right: int) -> str:
        cells = {2 * k: "|" for k in range(i)}
        cells[2 * i] = "*"
        if extra:
            cells.update({x: "-" for x in range(2 * i + 1, 2 * (i + extra))})
            cells[2 * (i + extra)] = "."
        cells.update({2 * (k + extra): "|" for k in range(i + 1, i + 1 + right)})
        return _row(cells)

    @staticmethod
    def _fan_out(i: int, extra: int, right: int) -> str:
        """The first parent goes straight on, the second one lane right, each later one from
        its dash one lane right; the lanes on the right make room for them."""
        cells = {2 * k: "|" for k in range(i + 1)}
        cells.update({2 * k + 1: "\\" for k in range(i, i + extra + 1)})
        cells.update({2 * (k + extra) + 1: "\\" for k in range(i + 1, i + 1 + right)})
        return _row(cells)

    @staticmethod
    def _collapse(target: list[int]) -> list[str]:
        """Rows joining each edge whose parent a lane on its left already waits for: one row per
        such edge, leftmost first, the lanes right of it closing up by one."""
        rows = []
        while target != list(range(len(target))):
            p = next(k for k, t in enumerate(target) if t != k)
            q = target[p]  # < p: the lane it joins
            cells = {2 * k: "|" for k in range(p)}
            cells[2 * p - 1] = "/"
            cells.update({x: "_" for x in range(2 * q + 1, 2 * p - 1, 2)})
            cells.update({2 * k - 1: "/" for k in range(p + 1, len(target))})
            rows.append(_row(cells))
            target = target[:p] + target[p + 1 :]
        return rows
