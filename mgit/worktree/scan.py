"""Walk the working tree: tracked-candidate files, honouring `.mgitignore` files.

`.mgitignore` uses gitignore syntax (dulwich's matcher); one may sit in any directory
and applies below it. Symlinks are followed (a Hugging Face snapshot is a tree of links),
with cycles cut by remembering real directory paths.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Collection
from dataclasses import dataclass, field
from pathlib import Path

from dulwich.ignore import IgnoreFilter, read_ignore_patterns

from mgit.errors import BadInputError
from mgit.graph.names import TMP_MARK, is_reserved
from mgit.lock import warn

IGNORE_FILE = ".mgitignore"


@dataclass
class Ignorer:
    root: Path
    _filters: dict[str, IgnoreFilter | None] = field(default_factory=dict)

    def _filter(self, rel_dir: str) -> IgnoreFilter | None:
        if rel_dir not in self._filters:
            path = self.root / rel_dir / IGNORE_FILE
            flt = None
            if path.is_file():
                with open(path, "rb") as f:
                    flt = IgnoreFilter(list(read_ignore_patterns(f)))
            self._filters[rel_dir] = flt
        return self._filters[rel_dir]

    def is_ignored(self, rel: str, is_dir: bool = False) -> bool:
        """Deepest .mgitignore with an opinion wins, as in git."""
        parts = rel.split("/")
        verdict = None
        for depth in range(len(parts)):
            rel_dir = "/".join(parts[:depth])
            flt = self._filter(rel_dir)
            if flt is None:
                continue
            sub = "/".join(parts[depth:]) + ("/" if is_dir else "")
            v = flt.is_ignored(sub)
            if v is not None:
                verdict = v
        return bool(verdict)


def _skip_name(name: str) -> bool:
    return name in (".mgit", ".git") or is_reserved(name) or TMP_MARK in name


def is_regular(st: os.stat_result) -> bool:
    """A regular file (a followed symlink's target): the only kind mgit reads. A FIFO, socket
    or device would block a read or never end."""
    return stat.S_ISREG(st.st_mode)


def _unreadable(rel: str, exc: OSError) -> BadInputError:
    what = exc.strerror or type(exc).__name__
    return BadInputError(
        f"cannot read {rel or '.'}: {what}; nothing was changed (fix its permissions, or list it in .mgitignore)"
    )


def _holders(tracked: Collection[str]) -> set[str]:
    """Every directory (relative, '' the root) holding a tracked path, and the paths themselves."""
    out = {""}
    for path in tracked:
        parts = path.split("/")
        out.update("/".join(parts[:n]) for n in range(1, len(parts) + 1))
    return out


def walk(  # noqa: C901 (git's rules for unreadable, special and ignored paths)
    root: Path,
    start: str = "",
    ignorer: Ignorer | None = None,
    special: list[str] | None = None,
    tracked: Collection[str] | None = None,
) -> dict[str, os.stat_result]:
    """Every non-ignored regular file under ``start`` (a relative dir or ''), with its stat.

    A directory or file that cannot be listed or stat'ed is an error naming it when it holds
    tracked paths (``tracked``, the index's; None: every path counts), never taken as empty
    or gone (that would unstage its files); an untracked one is skipped with a warning, as
    git does. Other kinds of file (FIFOs, sockets, devices) are left out, their paths
    appended to ``special`` when given."""
    ignorer = ignorer or Ignorer(root)
    out: dict[str, os.stat_result] = {}
    seen_dirs: set[str] = set()
    holders = None if tracked is None else _holders(tracked)

    def unreadable(rel: str, exc: OSError) -> None:
        if holders is None or rel in holders or rel == start:
            raise _unreadable(rel, exc) from None
        warn(f"cannot read {rel}: {exc.strerror or type(exc).__name__}; skipped (it holds no tracked files)")

    def visit(rel_dir: str) -> None:
        full = root / rel_dir if rel_dir else root
        real = os.path.realpath(full)
        if real in seen_dirs:
            return
        seen_dirs.add(real)
        try:
            names = sorted(os.listdir(full))
        except OSError as exc:
            unreadable(rel_dir, exc)
            return
        for name in names:
            if _skip_name(name):
                continue
            rel = f"{rel_dir}/{name}" if rel_dir else name
            try:
                st = os.stat(root / rel)  # follows symlinks
            except FileNotFoundError:
                continue  # a dangling symlink, or a file deleted since the listing
            except OSError as exc:
                unreadable(rel, exc)
                continue
            is_dir = stat.S_ISDIR(st.st_mode)
            if ignorer.is_ignored(rel, is_dir):
                continue
            if is_dir:
                visit(rel)
            elif is_regular(st):
                out[rel] = st
            elif special is not None:
                special.append(rel)

    if start and not (root / start).is_dir():
        try:
            st = os.stat(root / start)
        except OSError as exc:
            raise _unreadable(start, exc) from None
        if not ignorer.is_ignored(start):
            if is_regular(st):
                out[start] = st
            elif special is not None:
                special.append(start)
        return out
    visit(start)
    return out
