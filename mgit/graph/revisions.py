"""Revision ranges, read as git reads them, in one place for `log` and `diff`.

``A..B`` is what B reaches and A does not; ``A...B`` is what either reaches and not both (the
symmetric difference: both, less their merge bases); ``^A`` is "not what A reaches"; a side
left empty is HEAD (``main..`` is ``main..HEAD``). `diff` reads the same text as two commits:
``A..B`` is A against B, ``A...B`` the merge base of A and B against B (what B changed since it
left A). A single revision is resolved by :meth:`Refs.resolve`.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from mgit.errors import RevisionError
from mgit.graph.objects import Graph
from mgit.graph.refs import Refs


@dataclass(frozen=True)
class Range:
    left: str
    right: str
    symmetric: bool  # A...B


def split_range(spec: str) -> Range | None:
    """``A..B`` or ``A...B`` split at its dots (None: not a range). Ref names cannot hold
    ``..``, so the first dots are the range's."""
    for dots in ("...", ".."):
        left, found, right = spec.partition(dots)
        if found:
            if not left and not right:
                raise RevisionError(f"invalid revision range {spec!r}: name at least one side")
            return Range(left or "HEAD", right or "HEAD", dots == "...")
    return None


@dataclass
class Selection:
    """The commits a walk shows: what ``include`` reaches and ``exclude`` does not (ids)."""

    include: list[str] = field(default_factory=list)
    exclude: list[str] = field(default_factory=list)


def select(refs: Refs, graph: Graph, specs: Iterable[str]) -> Selection:
    """What `log A B ^C D..E F...G` shows, as commits to walk from and commits to stop at."""
    sel = Selection()
    for spec in specs:
        rng = split_range(spec)
        if rng is None and spec.startswith("^") and len(spec) > 1:
            sel.exclude.append(refs.resolve(spec[1:]))
        elif rng is None:
            sel.include.append(refs.resolve(spec))
        elif rng.symmetric:
            a, b = refs.resolve(rng.left), refs.resolve(rng.right)
            sel.include += [a, b]
            sel.exclude += graph.merge_bases(a, b)
        else:
            sel.exclude.append(refs.resolve(rng.left))
            sel.include.append(refs.resolve(rng.right))
    sel.include, sel.exclude = list(dict.fromkeys(sel.include)), list(dict.fromkeys(sel.exclude))
    return sel


def diff_pair(refs: Refs, graph: Graph, spec: str) -> tuple[tuple[str, str], tuple[str, str]] | None:
    """The two commits `diff A..B` / `diff A...B` compares, each with its name for the output
    (the merge base by its short id); None: ``spec`` is no range."""
    rng = split_range(spec)
    if rng is None:
        return None
    b = (refs.resolve(rng.right), rng.right)
    if not rng.symmetric:
        return (refs.resolve(rng.left), rng.left), b
    bases = graph.merge_bases(refs.resolve(rng.left), b[0])
    if not bases:
        raise RevisionError(f"{spec}: {rng.left} and {rng.right} have no common ancestor")
    base = min(bases)  # several (a criss-cross): git takes one too; the smallest id, to be repeatable
    return (base, base[:12]), b
