"""`mv`: rename tracked files or directories in the working tree and the index at once, as
git mv. A moved file keeps its staged entry and, where the stat cache vouched for it before
the rename, a fresh stat (a renamed model is not hashed again by the next status)."""

from __future__ import annotations

import os
import posixpath
from collections.abc import Iterable
from pathlib import Path

from mgit.context import Context
from mgit.errors import BadInputError
from mgit.graph.snapshot import validate_path
from mgit.ops.paths import prune_dirs, under
from mgit.worktree.index import Index, IndexEntry


def mv(
    ctx: Context, sources: Iterable[str | os.PathLike[str]], destination: str | os.PathLike[str], force: bool = False
) -> list[tuple[str, str]]:
    """Move or rename tracked files and directories, as ``git mv`` does.

    Everything is checked before anything moves. Untracked files inside a moved directory move
    with it, as git's; should a rename fail midway, the index records the moves done before it.

    Args:
        sources: Tracked files, or directories holding tracked files.
        destination: The new path, or a directory to move into (several sources: it must be one).
        force: Overwrite an existing file (never a directory; a symbolic link counts as a file).

    Returns:
        (old, new) of each tracked file moved.

    Raises:
        BadInputError: An untracked source, a source inside another, a directory moved into
            itself, a destination that exists (without ``force``) or lies under a symbolic link.
    """
    sources = list(sources)
    if not sources:
        raise BadInputError("mv needs a source and a destination")
    with ctx.lock:
        index = ctx.index()
        dest = ctx.relpath(destination)
        into = _is_real_dir(ctx.root / dest) if dest else True
        if len(sources) > 1 and not into:
            raise BadInputError(f"destination {dest!r} is not a directory")
        rels = [ctx.relpath(s) for s in sources]
        _refuse_nested(rels)
        plan = [_planned(ctx, index, src, dest, into, force) for src in rels]
        taken = [new for _, _, moves in plan for new in moves.values()]
        if len(set(taken)) != len(taken):
            raise BadInputError(f"mv would move two files onto {_first_repeat(taken)!r}")
        done: list[tuple[str, str]] = []
        try:
            for src, target, moves in plan:
                fresh = _vouched(ctx, index, moves)
                if (ctx.root / src).exists():
                    (ctx.root / target).parent.mkdir(parents=True, exist_ok=True)
                    os.replace(ctx.root / src, ctx.root / target)  # a file over a file (-f); never a directory
                    prune_dirs(ctx.root, src)
                for old, new in moves.items():
                    ie = index.entries.pop(old)
                    for p in under(index.entries, new):  # -f: what was staged at the destination is replaced
                        del index.entries[p]
                    index.entries[new] = IndexEntry(ie.entry, None, 0, ie.skip_worktree, ie.stats, ie.projection)
                    if old in fresh:
                        _restat(ctx, index, new, index.entries[new], fresh[old])
                    done.append((old, new))
        finally:
            index.save()  # the moves made, even when a later rename failed
        return done


def _is_real_dir(path: Path) -> bool:
    """A directory, not a symbolic link to one (git does not move into a link's target)."""
    return path.is_dir() and not path.is_symlink()


def _refuse_nested(sources: list[str]) -> None:
    """One source inside another (``mv d d/f out``) would be moved twice: refused, as git can
    only fail halfway through it."""
    for src in sources:
        for other in sources:
            if other != src and (not other or src.startswith(other + "/")):
                raise BadInputError(f"source {src!r} is inside source {other!r}: name one of them")


def _planned(
    ctx: Context, index: Index, src: str, dest: str, into: bool, force: bool
) -> tuple[str, str, dict[str, str]]:
    """(source, target, tracked old path → new path), or the refusal, as git words it."""
    target = posixpath.join(dest, posixpath.basename(src)) if into else dest
    tracked = under(index.entries, src) if src else []
    where = f"source={src}, destination={target}"
    if not tracked:
        raise BadInputError(f"not under version control, {where}")
    if target == src or target.startswith(src + "/"):
        raise BadInputError(f"cannot move a directory into itself, {where}")
    validate_path(target)
    full, goal = ctx.root / src, ctx.root / target
    if not full.exists() and not all(index.entries[t].skip_worktree for t in tracked):
        raise BadInputError(f"bad source (it is not in the working tree; `mgit rm` it instead), {where}")
    if os.path.lexists(goal) or under(index.entries, target):
        if not force or goal.is_dir() or full.is_dir():
            raise BadInputError(f"destination exists (use -f to overwrite a file), {where}")
    _refuse_file_in_the_way(ctx.root, target, where)
    return src, target, {t: target + t[len(src) :] for t in tracked}


def _refuse_file_in_the_way(root: Path, target: str, where: str) -> None:
    """Each directory above the target must be a real directory of the working tree, or not
    exist yet: a file is in the way, and a symbolic link would take the file elsewhere."""
    parent = posixpath.dirname(target)
    while parent:
        if (root / parent).is_symlink():
            raise BadInputError(f"destination directory {parent!r} is a symbolic link, {where}")
        if (root / parent).exists() and not (root / parent).is_dir():
            raise BadInputError(f"destination directory {parent!r} is a file, {where}")
        parent = posixpath.dirname(parent)


def _vouched(ctx: Context, index: Index, moves: dict[str, str]) -> dict[str, os.stat_result]:
    """The tracked files whose stat the cache vouches for now, before the rename (which
    changes their ctime), with that stat: after it they get a new stat without being hashed."""
    fresh = {}
    for old in moves:
        path = ctx.root / old
        if path.is_file() and index.entries[old].matches(st := os.stat(path)):
            fresh[old] = st
    return fresh


def _restat(ctx: Context, index: Index, rel: str, ie: IndexEntry, before: os.stat_result) -> None:
    """Record a renamed file's stat if only its ctime changed (the rename's): the clock is read
    first (waiting for it to pass the new ctime where that is cheaper than hashing), so a
    later write is still seen."""
    path = ctx.root / rel
    since = index.read_clock([os.stat(path)])
    st = os.stat(path)
    if (st.st_size, st.st_mtime_ns, st.st_ino) == (before.st_size, before.st_mtime_ns, before.st_ino):
        index.refresh(rel, ie, st, since)


def _first_repeat(items: list[str]) -> str:
    seen: set[str] = set()
    for item in items:
        if item in seen:
            return item
        seen.add(item)
    return ""
