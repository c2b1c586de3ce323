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
from dataclasses import dataclass
from pathlib import Path

from dulwich.reflog import format_reflog_line

from mgit.dirs import prune_dirs
from mgit.graph.objects import local_offset

DELETED = "refs/mgit/deleted/"
ZERO = b"0" * 40


@dataclass(frozen=True)
class Grave:
    """A branch's reflog kept by :func:`bury`: ``ref`` is ``refs/mgit/deleted/<seconds>/<name>``,
    ``own`` the length in bytes of the branch's own reflog at its start (what :func:`unbury`
    gives back to the branch when its deletion fails)."""

    ref: str
    name: str
    own: int


def bury(git_dir: Path, name: str, tip: str, identity: bytes, message: str) -> Grave:
    """Keep the reflog of branch ``name`` (about to be deleted, or replaced, at ``tip``) as
    ``refs/mgit/deleted/<seconds>/<name>``, ending with the line ``tip → 0``. A reflog that
    is missing or empty (`reflog expire` emptied it) first gets the line ``0 → tip``, so that
    ``NAME@{1}`` names the tip, as the deletion note says. Called before the ref goes: a kill
    in between leaves the ref and a kept copy of its history."""
    logs = Path(git_dir) / "logs"
    stamp = int(time.time())
    while not _free(logs / f"{DELETED}{stamp}" / name):
        stamp += 1  # a deletion of this name (or of a/b beside a) within the same second
    grave = f"{DELETED}{stamp}/{name}"
    dest, source = logs / grave, logs / f"refs/heads/{name}"
    own = source.stat().st_size if source.is_file() else 0
    if source.is_file():
        os.replace(source, dest)
        prune_dirs(logs / "refs" / "heads", name)
    offset = local_offset(stamp)
    lines = [format_reflog_line(tip.encode(), ZERO, identity, stamp, offset, message.encode())]
    if not own:
        was = f"branch: {name} was at {tip[:12]}".encode()
        lines.insert(0, format_reflog_line(ZERO, tip.encode(), identity, stamp, offset, was))
    with open(dest, "ab") as f:
        f.write(b"".join(line + b"\n" for line in lines))
    return Grave(grave, name, own)


def unbury(git_dir: Path, grave: Grave) -> None:
    """Give a buried reflog back to its branch, whose deletion (or replacement) failed: the
    branch's own entries, then any that a move of the branch in the meantime logged."""
    logs = Path(git_dir) / "logs"
    dest, source = logs / grave.ref, logs / f"refs/heads/{grave.name}"
    with open(dest, "rb") as f:
        own = f.read(grave.own)
    since = source.read_bytes() if source.is_file() else b""
    if own or since:
        source.parent.mkdir(parents=True, exist_ok=True)
        tmp = source.with_name(f"{source.name}.tmp-{os.getpid()}")
        tmp.write_bytes(own + since)
        os.replace(tmp, source)
    dest.unlink()
    prune_dirs(logs, grave.ref)


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
