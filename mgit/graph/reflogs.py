"""The reflogs of deleted branches (the "graveyard"): a deleted branch's reflog is kept, not
deleted as git deletes it, under ``logs/refs/mgit/deleted/<seconds>/<branch>``, with a last
entry recording the deletion (old: the branch's tip). Models are expensive to remake: every
commit the branch held stays a gc root (docs/format.md §11.3, §15.1) until `reflog expire`
drops the entries, and ``BRANCH@{1}`` / `reflog show BRANCH` still find it.

The graveyard name is a valid ref name (so a git tool reading ``.mgit`` counts it as a reflog
too), never a ref itself (no ``refs/mgit/deleted/…`` ref file exists), and a number of seconds
as the first component keeps two deleted branches ``a`` and ``a/b`` from clashing.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from dulwich.reflog import format_reflog_line

DELETED = "refs/mgit/deleted/"
ZERO = b"0" * 40


def bury(git_dir: Path, name: str, tip: str, identity: bytes, message: str) -> str:
    """Keep the reflog of branch ``name`` (about to be deleted, or replaced, at
    ``tip``) as ``refs/mgit/deleted/<seconds>/<name>``, ending with the line ``tip → 0`` so
    that the tip is kept even when the branch had no reflog; returns the graveyard ref. Called
    before the ref goes: a kill in between leaves the ref and a kept copy of its history."""
    logs = Path(git_dir) / "logs"
    stamp = int(time.time())
    while not _free(logs / f"{DELETED}{stamp}" / name):
        stamp += 1  # a deletion of this name (or of a/b beside a) within the same second
    grave = f"{DELETED}{stamp}/{name}"
    dest, source = logs / grave, logs / f"refs/heads/{name}"
    if source.is_file():
        os.replace(source, dest)
        prune_empty(source, logs / "refs" / "heads")
    line = format_reflog_line(tip.encode(), ZERO, identity, stamp, -time.timezone, message.encode())
    with open(dest, "ab") as f:
        f.write(line + b"\n")
    return grave


def _free(path: Path) -> bool:
    """Whether a reflog can be created at ``path`` (its directories made): nothing there, and
    no file where a directory above it must be."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        return False
    return not path.exists()


def graves(git_dir: Path, name: str) -> list[str]:
    """The graveyard refs of branch ``name``, oldest first (each deletion of it keeps one)."""
    top = Path(git_dir) / "logs" / DELETED
    if not top.is_dir():
        return []
    stamps = sorted((d.name for d in top.iterdir() if d.name.isdigit()), key=int)
    return [f"{DELETED}{s}/{name}" for s in stamps if (top / s / name).is_file()]


def is_grave(ref: str) -> bool:
    return ref.startswith(DELETED)


def prune_empty(path: Path, stop: Path) -> None:
    """Remove the empty directories above ``path`` up to (not including) ``stop``: a directory
    left where a reflog was would stand in the way of a later branch of that name."""
    parent = path.parent
    while parent != stop and stop in parent.parents:
        try:
            parent.rmdir()
        except OSError:
            return
        parent = parent.parent
