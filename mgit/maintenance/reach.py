"""What a repository still needs: every git object and chunk reachable from a ref, a
reflog entry, the index or an interrupted operation's journal, each chunk with the first
path/tensor found using it."""

from __future__ import annotations

import os
import re
from collections.abc import Set
from pathlib import Path

from dulwich.reflog import Entry, parse_reflog_line

from mgit.graph.integrity import scan_refs
from mgit.graph.objects import Graph
from mgit.model.reach import Reach, walk
from mgit.worktree import journal
from mgit.worktree.index import Index

ZERO = "0" * 40


def reflog_lines(path: Path) -> tuple[list[Entry], list[int]]:
    """A reflog's entries, oldest first, and the numbers of its lines that do not parse."""
    entries, bad = [], []
    with open(path, "rb") as f:
        for n, line in enumerate(f, 1):
            try:
                entry = parse_reflog_line(line.rstrip(b"\n"))
                if not all(re.fullmatch(rb"[0-9a-f]{40}", s) for s in (entry.old_sha, entry.new_sha)):
                    raise ValueError
            except Exception:
                bad.append(n)
                continue
            entries.append(entry)
    return entries, bad


def _reflog_ids(git_dir: Path) -> set[str]:
    out = set()
    logs = git_dir / "logs"
    for dirpath, _, files in os.walk(logs):
        for name in files:
            for entry in reflog_lines(Path(dirpath) / name)[0]:
                out.update({entry.old_sha.decode(), entry.new_sha.decode()})
    out.discard(ZERO)
    return out


def damaged_reflogs(git_dir: Path) -> dict[Path, list[int]]:
    """Each reflog with lines that do not parse → their numbers."""
    out = {}
    for dirpath, _, files in os.walk(git_dir / "logs"):
        for name in files:
            bad = reflog_lines(Path(dirpath) / name)[1]
            if bad:
                out[Path(dirpath) / name] = bad
    return out


def roots(graph: Graph, index: Index | None, damaged: dict[str, str] | None = None) -> dict[str, str]:
    """Object id → where it is referenced from (refs, reflogs, index); refs that cannot be
    read go into ``damaged`` (ref → why) instead."""
    out: dict[str, str] = {}
    scan = scan_refs(graph.git_dir)
    if damaged is not None:
        damaged.update(scan.damaged)
    for ref, sha in sorted(scan.values.items(), key=lambda kv: (kv[0] == "HEAD", kv[0])):  # a branch's name first
        out.setdefault(sha, ref)
    for sha in _reflog_ids(graph.git_dir):
        out.setdefault(sha, "a reflog entry")
    plan = journal.load(graph.git_dir)  # until HEAD moves, a failed recovery's commit is named only here
    if plan is not None and plan.target:  # restoring from the index names no commit
        out.setdefault(plan.target, "the interrupted operation's journal")
    if index is not None:
        for path, ie in index.entries.items():
            out.setdefault(ie.entry.oid, f"the index ({path})")
            if ie.stats:
                out.setdefault(ie.stats, f"the index ({path} statistics)")
            if ie.projection:  # a sparse working file's own header and manifests
                out.setdefault(ie.projection, f"the index ({path})")
    return out


def reachable(
    graph: Graph, index: Index | None, starts: dict[str, str] | None = None, stop: Set[str] = frozenset()
) -> Reach:
    """Everything reachable from ``starts`` (object id → where from; default: every root —
    refs, reflogs, the journal, the index — with damaged refs and reflog lines reported first),
    not walking into the commits in ``stop`` (a remote already holds them)."""
    damaged_refs: dict[str, str] = {}
    problems: list[str] = []
    if starts is None:
        starts = roots(graph, index, damaged_refs)
        problems += [f"ref {ref} is damaged: {why}" for ref, why in sorted(damaged_refs.items())]
        for path, lines in damaged_reflogs(graph.git_dir).items():  # a damaged line may have kept a commit
            where = path.relative_to(graph.git_dir).as_posix()
            problems.append(f"reflog {where} is damaged (line {', '.join(map(str, lines))} cannot be read)")
    reach = walk(graph, starts, stop)
    reach.missing[:0] = problems
    return reach
