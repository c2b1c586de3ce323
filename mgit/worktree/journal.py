"""The journal of a working-tree operation in progress: ``.mgit/journal.json``.

A checkout (or the checkout that ends a merge) writes the journal atomically before it
writes the first temporary file and removes it once the index and HEAD are final. A killed
or interrupted operation leaves it behind, and the next command that takes the repository
lock finishes the operation from it (roll forward): the temporaries left beside the files it
names are removed, every file is written, or found already written, the index records them,
and HEAD moves as the journal says. The steps are idempotent, so a recovery that is itself
killed is simply run again. Restoring paths journals them too, only so that the next command
removes what a killed run left (``roll_forward`` false: it is run again, not finished).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from mgit import _crashpoints
from mgit.durable import fsync_dir
from mgit.errors import CorruptObjectError
from mgit.graph.snapshot import Entry
from mgit.worktree.sparse import SparsePatterns

JOURNAL_FILE = "journal.json"
SCHEMA = "mgit.journal/1"
# A journal whose index differs from what it writes (``staged``): an mgit that predates it would
# stage what the files hold, so it refuses this schema instead of finishing the operation wrongly.
STAGED_SCHEMA = "mgit.journal/2"
HEAD_MOVES = ("none", "branch", "create", "detach", "advance")


@dataclass
class Write:
    """A file the operation writes: ``entry`` staged; the working file shows ``form``
    (a sparse projection) or, when not ``written``, is left out."""

    entry: Entry
    form: Entry
    written: bool = True


@dataclass(frozen=True)
class Staged:
    """What the index holds at a path once the operation is complete, where that is not the
    entry its write stages (``stash apply``: git's treatment, a staged change comes back
    unstaged): ``entry`` None, nothing (the file is left untracked); ``stats``, the blob of its
    chunk statistics."""

    entry: Entry | None
    stats: str | None = None


@dataclass
class Journal:
    op: str  # "checkout" or "merge", for messages
    rev: str  # what the user named, for messages
    target: str  # the commit the working tree moves to
    writes: dict[str, Write] = field(default_factory=dict)
    removes: list[str] = field(default_factory=list)
    head: str = "none"  # how HEAD moves at the end (HEAD_MOVES)
    branch: str | None = None  # for "branch" and "create"
    old_head: str | None = None  # HEAD before the operation ("advance": the CAS's old value)
    message: str = ""  # reflog message of an "advance"
    patterns: SparsePatterns | None = None
    set_patterns: bool = False  # whether the operation changes the sparse patterns
    switch_after: bool = False  # merge -b: once the branch exists, check it out
    staged: dict[str, Staged] = field(default_factory=dict)  # the index at the end, where not ``writes``
    roll_forward: bool = True  # false (restoring paths): recovery only removes the temporaries

    def describe(self) -> str:
        return f"{self.op} of {self.rev}"


def _entry(e: Entry) -> list[str | int]:
    return [e.kind, e.oid, e.mode]


def _to_json(j: Journal) -> dict[str, Any]:
    pats = j.patterns
    staged = {p: {"entry": _entry(s.entry) if s.entry else None, "stats": s.stats} for p, s in j.staged.items()}
    return {
        "schema": STAGED_SCHEMA if j.staged else SCHEMA,
        "op": j.op,
        "rev": j.rev,
        "target": j.target,
        "writes": {
            p: {"entry": _entry(w.entry), "form": _entry(w.form), "written": w.written} for p, w in j.writes.items()
        },
        "removes": j.removes,
        "head": j.head,
        "branch": j.branch,
        "old_head": j.old_head,
        "message": j.message,
        "patterns": None if pats is None else {"include": list(pats.include), "exclude": list(pats.exclude)},
        "set_patterns": j.set_patterns,
        "switch_after": j.switch_after,
        "roll_forward": j.roll_forward,
    } | ({"staged": staged} if staged else {})


def _from_json(obj: dict[str, Any]) -> Journal:
    if obj.get("schema") not in (SCHEMA, STAGED_SCHEMA) or obj["head"] not in HEAD_MOVES:
        raise ValueError
    pats = obj["patterns"]
    staged = obj["staged"] if obj["schema"] == STAGED_SCHEMA else {}
    return Journal(
        op=str(obj["op"]),
        rev=str(obj["rev"]),
        target=str(obj["target"]),
        writes={p: Write(Entry(*w["entry"]), Entry(*w["form"]), bool(w["written"])) for p, w in obj["writes"].items()},
        removes=[str(p) for p in obj["removes"]],
        head=obj["head"],
        branch=obj["branch"],
        old_head=obj["old_head"],
        message=str(obj["message"]),
        patterns=None if pats is None else SparsePatterns(tuple(pats["include"]), tuple(pats["exclude"])),
        set_patterns=bool(obj["set_patterns"]),
        switch_after=bool(obj["switch_after"]),
        staged={p: Staged(Entry(*s["entry"]) if s["entry"] else None, s["stats"]) for p, s in staged.items()},
        roll_forward=bool(obj.get("roll_forward", True)),  # absent: written before it existed
    )


def path_of(git_dir: Path) -> Path:
    return git_dir / JOURNAL_FILE


def exists(git_dir: Path) -> bool:
    return path_of(git_dir).is_file()


def load(git_dir: Path) -> Journal | None:
    path = path_of(git_dir)
    try:
        text = path.read_text("utf-8")
    except FileNotFoundError:
        return None
    try:
        return _from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError):
        raise CorruptObjectError(
            f"{path} (an interrupted checkout's journal) is damaged; delete it and run `mgit checkout --force HEAD`"
        ) from None


def save(git_dir: Path, journal: Journal) -> None:
    """Write the journal durably (fsync, rename, fsync of .mgit) before the working tree changes."""
    path = path_of(git_dir)
    tmp = path.with_name(path.name + ".tmp")
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            json.dump(_to_json(journal), f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # nothing was written to the working tree yet: leave nothing behind
        tmp.unlink(missing_ok=True)
        raise exc if exc.filename is not None else OSError(exc.errno, exc.strerror, str(path)) from None
    fsync_dir(git_dir)


def clear(git_dir: Path) -> None:
    """The operation is complete: index and HEAD are final."""
    _crashpoints.point("rename")  # as good as a rename: the commit point of the operation
    path_of(git_dir).unlink(missing_ok=True)
