"""Walks of the commit graph: a commit's ancestors, and whether one commit is an ancestor of
another. Graph reads only, so light commands (`branch -vv` counting ahead and behind) use them
without loading the chunk machinery that pushing and fetching (mgit.remote.transfer) need.

Both walks stop at commits this repository does not hold (a shallow or partial history), so
they answer for the history held here."""

from __future__ import annotations

from mgit.graph.objects import Graph


def ancestors(graph: Graph, commit: str) -> set[str]:
    """``commit`` and every ancestor of it held here."""
    seen, pending = set(), [commit]
    while pending:
        sha = pending.pop()
        if sha in seen or not graph.has(sha):
            continue
        seen.add(sha)
        pending.extend(graph.commit(sha).parents)
    return seen


def is_ancestor(graph: Graph, old: str, new: str) -> bool:
    """Whether commit ``old`` is ``new`` or one of its ancestors (both local)."""
    seen, pending = set(), [new]
    while pending:
        sha = pending.pop()
        if sha == old:
            return True
        if sha in seen or not graph.has(sha):
            continue
        seen.add(sha)
        pending.extend(graph.commit(sha).parents)
    return False
