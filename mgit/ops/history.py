"""`log`: which commits, in which order, with which edges to draw.

The commits are those the revisions reach (``A..B``, ``A...B``, ``^A``: mgit.graph.revisions;
``all_refs``: every branch, tag and remote-tracking branch, and HEAD), kept if they touch
``paths``, match an ``author`` pattern and fall between ``since`` and ``until``; newest first.
For `log --graph` the order is git's graph order and each commit's edges go to its nearest
shown ancestors along each parent (git's parent rewriting), so a filtered history still draws
as one connected graph. Every object is read checked: a damaged commit is named in one line.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import TypedDict, Unpack

from dulwich.approxidate import parse_approxidate
from dulwich.objects import Commit, Tag

from mgit.context import Context
from mgit.errors import BadInputError
from mgit.graph.objects import CommitInfo
from mgit.graph.revisions import Selection, select

# refs of mgit's own bookkeeping (sketch records, imported expert directories): not history
_PRIVATE_REFS = (b"refs/mgit/", b"refs/imports/")


@dataclass(frozen=True)
class LogGraph:
    """`log --graph`: the commits in graph order, and the parents each one's edges go to (its
    nearest shown ancestors along each parent; a parent cut off by ``max_count`` is kept)."""

    commits: list[CommitInfo]
    parents: dict[str, tuple[str, ...]]


@dataclass(frozen=True)
class _Keep:
    paths: list[bytes]
    authors: list[re.Pattern[str]]
    since: int | None
    until: int | None

    def narrows(self) -> bool:
        return bool(self.paths or self.authors) or self.since is not None or self.until is not None

    def author_matches(self, c: CommitInfo) -> bool:
        """Whether ``c``'s author matches a pattern (paths and times the walker itself keeps)."""
        return not self.authors or any(a.search(c.author) for a in self.authors)


Revs = str | Sequence[str]


class Filter(TypedDict, total=False):
    """`log`'s keywords: ``all_refs`` (start from every branch, tag and remote-tracking branch,
    and HEAD), ``author`` (regular expressions, any may match "Name <email>"), ``since`` and
    ``until`` (the commit time as git reads it, "2 weeks ago", "2025-01-31", or an epoch int)."""

    all_refs: bool
    author: str | Sequence[str]
    since: str | int | None
    until: str | int | None


def log(
    ctx: Context, rev: Revs = "HEAD", paths: Iterable[str] = (), max_count: int | None = None, **filters: Unpack[Filter]
) -> list[CommitInfo]:
    """The commits a revision reaches, newest first, as ``git log`` lists them.

    Args:
        rev: A revision or range (``A..B``, ``A...B``, ``^A``), or a list of them.
        paths: Only commits that touch these paths.
        max_count: At most this many (a negative one: no limit, as git's ``-n -1``).
        **filters: ``all_refs``, ``author``, ``since``, ``until`` (see :class:`Filter`).

    Returns:
        The commits' ids, authors, times, messages and parents.

    Raises:
        RevisionError: A revision names no commit.
        BadInputError: A filter git would refuse (an unreadable date, a bad pattern).
    """
    sel, keep = _query(ctx, rev, paths, filters)
    limit = _limit(max_count)
    out: list[CommitInfo] = []
    for c in _walk(ctx, sel, keep):
        if limit is not None and len(out) >= limit:
            break
        out.append(c)
    return out


def log_graph(
    ctx: Context, rev: Revs = "HEAD", paths: Iterable[str] = (), max_count: int | None = None, **filters: Unpack[Filter]
) -> LogGraph:
    """As :func:`log`, in git's graph order, with the parents each commit's edges go to.

    For ``log --graph``: the parents are rewritten past the commits ``paths`` or ``filters``
    leave out, so the drawing's edges join the commits shown.

    Args:
        rev: A revision or range, or a list of them (as :func:`log`).
        paths: Only commits that touch these paths.
        max_count: At most this many (a negative one: no limit).
        **filters: As :func:`log`'s.

    Returns:
        The commits in graph order and, for each, the parents its edges go to.

    Raises:
        RevisionError: A revision names no commit.
    """
    sel, keep = _query(ctx, rev, paths, filters)
    shown = {c.id: c for c in _walk(ctx, sel, keep)}
    walked = {c.id for c in _walk(ctx, sel, None)} if keep.narrows() else set(shown)
    parents = rewrite_parents(list(shown), walked, lambda sha: ctx.graph.commit(sha).parents)
    order = graph_order(list(shown), parents)[: _limit(max_count)]
    return LogGraph([shown[c] for c in order], {c: parents[c] for c in order})


def _limit(max_count: int | None) -> int | None:
    """``-n``: a negative count means no limit, as in git (and never a slice from the end)."""
    return None if max_count is None or max_count < 0 else max_count


def _query(ctx: Context, rev: Revs, paths: Iterable[str], filters: Filter) -> tuple[Selection, _Keep]:
    revs = [rev] if isinstance(rev, str) else list(rev)
    author = filters.get("author", ())
    keep = _Keep(
        [ctx.relpath(p).encode() for p in paths],
        [_pattern(a) for a in ([author] if isinstance(author, str) else author)],
        _time(filters.get("since"), "since"),
        _time(filters.get("until"), "until"),
    )
    all_refs = filters.get("all_refs", False)
    if revs == ["HEAD"] and ctx.refs.head() is None and not all_refs:
        return Selection(), keep  # an unborn branch: no history yet
    sel = select(ctx.refs, ctx.graph, [] if all_refs and revs == ["HEAD"] else revs)
    if all_refs:
        sel.include = list(dict.fromkeys([*sel.include, *_ref_tips(ctx)]))
    return sel, keep


def _ref_tips(ctx: Context) -> list[str]:
    """The commits every ref and HEAD name (tags peeled), as `git log --all` starts from."""
    tips = [ctx.refs.head()]
    refs = ctx.graph.repo.refs
    for ref in sorted(refs.allkeys()):
        if ref == b"HEAD" or ref.startswith(_PRIVATE_REFS):
            continue
        obj = ctx.graph.checked(refs[ref].decode())
        while isinstance(obj, Tag):  # an annotated tag: the commit it names
            obj = ctx.graph.checked(obj.object[1].decode())
        if isinstance(obj, Commit):
            tips.append(obj.id.decode())
    return [t for t in dict.fromkeys(tips) if t is not None]


def _walk(ctx: Context, sel: Selection, keep: _Keep | None) -> Iterator[CommitInfo]:
    if not sel.include:
        return
    walker = ctx.graph.walker(
        sel.include,
        sel.exclude,
        paths=(keep.paths or None) if keep else None,
        since=keep.since if keep else None,
        until=keep.until if keep else None,
    )
    for entry in walker:
        c = ctx.graph.commit(entry.commit.id.decode())
        if keep is None or keep.author_matches(c):
            yield c


def _pattern(text: str) -> re.Pattern[str]:
    try:
        return re.compile(text)
    except re.error as exc:
        raise BadInputError(f"invalid --author pattern {text!r}: {exc}") from None


def _time(value: str | int | None, what: str) -> int | None:
    if value is None or isinstance(value, int):
        return value
    try:
        return parse_approxidate(value)
    except ValueError:
        raise BadInputError(
            f"cannot read --{what} {value!r} as a time (e.g. '2 weeks ago', 'yesterday', '2025-01-31', "
            "'2025-01-31 14:00:00', or seconds since the epoch)"
        ) from None


def rewrite_parents(
    shown: Sequence[str], walked: set[str], parents_of: Callable[[str], Sequence[str]]
) -> dict[str, tuple[str, ...]]:
    """Each shown commit's parents as a graph draws them: a parent outside the walk (an
    excluded one) is left out; a walked but hidden one (filtered out) is replaced by its own,
    until shown commits are reached. Iterative, for histories of any depth."""
    visible = set(shown)
    hidden: dict[str, tuple[str, ...]] = {}  # a hidden commit → its nearest shown ancestors

    def through(parents: Sequence[str]) -> tuple[str, ...]:
        out: list[str] = []
        for p in parents:
            if p in visible:
                out.append(p)
            elif p in walked:
                out += hidden[p]
        return tuple(dict.fromkeys(out))

    for start in shown:
        todo = [p for p in parents_of(start) if p in walked and p not in visible]
        while todo:
            c = todo[-1]
            if c in hidden:
                todo.pop()
                continue
            pending = [p for p in parents_of(c) if p in walked and p not in visible and p not in hidden]
            if pending:
                todo += pending
                continue
            hidden[c] = through(parents_of(c))
            todo.pop()
    return {c: through(parents_of(c)) for c in shown}


def graph_order(commits: Sequence[str], parents: dict[str, tuple[str, ...]]) -> list[str]:
    """``commits`` (newest first, as walked) in git's graph order (`log --graph` implies
    --topo-order): no commit before all its children, each line of history in one run; the
    tips in the given order, then depth first, a merge's last parent first."""
    shown = set(commits)
    children = dict.fromkeys(commits, 0)
    for c in commits:
        for p in parents[c]:
            if p in shown:
                children[p] += 1
    stack = [c for c in reversed(commits) if children[c] == 0]
    out = []
    while stack:
        c = stack.pop()
        out.append(c)
        for p in parents[c]:
            if p in shown:
                children[p] -= 1
                if children[p] == 0:
                    stack.append(p)
    return out
