"""Views of staging: `add`, `commit` and `status` (schemas mgit.add/1, mgit.commit/1, mgit.status/1)."""

from __future__ import annotations

import posixpath
from typing import TYPE_CHECKING

from rich.filesize import decimal
from rich.markup import escape

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.ops.stash import StashEntry
    from mgit.repo import AddResult
    from mgit.worktree.sparse import SparseSummary
    from mgit.worktree.status import FileStatus, Status


def add_json(res: AddResult) -> dict:
    return document("mgit.add/1", vars(res))


def add_text(res: AddResult) -> Printout:
    p = Printout()
    if res.added or res.removed:
        p.err(
            f"staged {len(res.added)} file(s), unstaged {len(res.removed)} deleted; "
            f"{decimal(res.logical_bytes)} read, {decimal(res.stored_bytes)} new in the store "
            f"({res.new_chunks} new chunks)"
        )
    return p


def commit_json(sha: str, branch: str | None, parents: list[str]) -> dict:
    return document("mgit.commit/1", {"commit": sha, "branch": branch, "parents": parents})


def commit_line(sha: str, branch: str | None, message: str) -> str:
    where = branch or "detached HEAD"
    return f"[{where} {sha[:12]}] {message.strip().splitlines()[0]}"


def shown_path(path: str, here: str) -> str:
    """A repository path as seen from the directory ``here`` (repository-relative, '' for the
    root), as git's status prints it (``../top``; a directory keeps its ``/``)."""
    if not here:
        return path
    rel = posixpath.relpath(path, here)
    return rel + "/" if path.endswith("/") else rel


def describe(f: FileStatus, here: str = "") -> str:
    """One file's status line: its change, path (seen from ``here``), which tensors changed
    and any note."""
    text = f"{f.change + ':':<10} {shown_path(f.path, here)}"
    t = f.tensors
    if t:
        bits = []
        for label, names in (("changed", t.changed), ("added", t.added), ("removed", t.removed)):
            if names:
                shown = ", ".join(names[:3]) + (f", +{len(names) - 3} more" if len(names) > 3 else "")
                bits.append(f"{len(names)} tensor(s) {label}: {shown}")
        text += "  (" + "; ".join(bits) + ")"
    if f.note:
        text += f"  ({f.note})"
    return text


def file_status_json(f: FileStatus) -> dict:
    d: dict = {"path": f.path, "change": f.change}
    if f.tensors is not None:
        d["tensors"] = {"added": f.tensors.added, "removed": f.tensors.removed, "changed": f.tensors.changed}
    if f.note:
        d["note"] = f.note
    return d


def sparse_json(sparse: SparseSummary | None) -> dict | None:
    if sparse is None:
        return None
    return {
        "include": list(sparse.patterns.include),
        "exclude": list(sparse.patterns.exclude),
        "tensors_present": sparse.tensors_present,
        "tensors_total": sparse.tensors_total,
    }


def sparse_line(sparse: SparseSummary) -> str:
    return (
        f"Sparse checkout ({sparse.patterns.describe()}): {sparse.tensors_present} of {sparse.tensors_total} "
        "tensors present (`mgit checkout HEAD --full` for all)"
    )


def status_json(st: Status) -> dict:
    return document(
        "mgit.status/1",
        {
            "branch": st.branch,
            "head": st.head,
            "staged": [file_status_json(f) for f in st.staged],
            "unstaged": [file_status_json(f) for f in st.unstaged],
            "untracked": st.untracked,
            "not_checked_out": st.not_checked_out,
            "sparse": sparse_json(st.sparse),
        },
    )


def status_text(st: Status, here: str = "") -> Printout:
    """`status`: paths seen from ``here`` (the current directory, repository-relative), the
    untracked ones collapsed as git's (a directory holding no tracked file is one ``dir/``)."""
    p = Printout()
    p.out(f"On branch {st.branch}" if st.branch else f"HEAD detached at {st.head[:12] if st.head else '?'}")
    if st.head is None:
        p.out("No commits yet")
    if st.sparse is not None:
        p.out(sparse_line(st.sparse), markup=False)
    for title, items, style in (
        ("Changes to be committed:", st.staged, "green"),
        ("Changes not staged for commit:", st.unstaged, "red"),
    ):
        if items:
            p.out(f"\n{title}")
            for f in items:
                p.out(f"  [{style}]{escape(describe(f, here))}[/{style}]", markup=True)
    if st.untracked:
        p.out("\nUntracked files:")
        for path in st.untracked_collapsed:
            p.out(f"  [red]{escape(shown_path(path, here))}[/red]")
    if st.not_checked_out:
        p.out(f"\nNot checked out (tracked, absent from the working tree): {len(st.not_checked_out)} file(s)")
        for path in st.not_checked_out:
            p.out(f"  {shown_path(path, here)}", markup=False)
    if st.clean:
        p.out("\nnothing to commit, working tree clean")
    return p


_CODES = {"added": "A", "modified": "M", "deleted": "D"}
_ESCAPES = {7: "a", 8: "b", 9: "t", 10: "n", 11: "v", 12: "f", 13: "r", 34: '"', 92: "\\"}


def quote_path(path: str) -> str:
    """A path as git's short status prints it: in double quotes, C-escaped (octal for bytes
    outside printable ASCII), when it holds a space, a quote, a backslash or such a byte."""
    raw = path.encode("utf-8", "surrogateescape")
    if all(0x20 < b < 0x7F and b not in (34, 92) for b in raw):
        return path
    escaped = "".join(
        f"\\{_ESCAPES[b]}" if b in _ESCAPES else chr(b) if 0x20 <= b < 0x7F else f"\\{b:03o}" for b in raw
    )
    return f'"{escaped}"'


def status_short(st: Status, here: str = "") -> Printout:
    """`status -s`: git's two columns, X the index against HEAD, Y the working tree against
    the index (A added, M modified, D deleted, ?? untracked, a directory holding no tracked
    file as one ``dir/``); tensor details left out. Paths are seen from ``here`` (the current
    directory, repository-relative; `--porcelain` gives '': from the root, as git's)."""
    codes: dict[str, list[str]] = {}
    for column, items in ((0, st.staged), (1, st.unstaged)):
        for f in items:
            codes.setdefault(f.path, [" ", " "])[column] = _CODES.get(f.change, "M")
    p = Printout()
    for path in sorted(codes, key=lambda x: x.encode("utf-8", "surrogateescape")):
        p.out(f"{''.join(codes[path])} {quote_path(shown_path(path, here))}", markup=False)
    for path in sorted(st.untracked_collapsed, key=lambda x: x.encode("utf-8", "surrogateescape")):
        p.out(f"?? {quote_path(shown_path(path, here))}", markup=False)
    return p


def config_json(found: list[tuple[str, str, str]]) -> dict:
    """``scope``: ``git`` (git's own files), ``global`` (the user's mgit file), ``local``."""
    return document("mgit.config/1", {"entries": [{"scope": w, "key": k, "value": v} for w, k, v in found]})


def config_list(found: list[tuple[str, str, str]]) -> Printout:
    """`config --list`: key=value lines, lowest precedence first (the last of a key wins), as git."""
    p = Printout()
    for _, key, value in found:
        p.out(f"{key}={value}", markup=False)
    return p


def stash_json(entries: list[StashEntry]) -> dict:
    """``entries``, newest first: ``name`` (``stash@{N}``), ``commit``, ``message``."""
    listed = [{"name": f"stash@{{{e.position}}}", "commit": e.commit, "message": e.message} for e in entries]
    return document("mgit.stash/1", {"entries": listed})


def stash_list(entries: list[StashEntry]) -> Printout:
    p = Printout()
    for e in entries:
        p.out(f"stash@{{{e.position}}}: {e.message}", markup=False)
    return p
