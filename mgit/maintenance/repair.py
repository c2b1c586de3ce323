"""``fsck --repair`` for the git side of a repository.

Git objects are content-addressed, so a damaged or missing one is restored exactly by
fetching it again from any remote that holds it (checked against its id like every fetch).
A damaged ref has no such id: its value is taken from the last entry of its reflog whose
commit is intact, else from a remote-tracking ref of the same branch, else from the
remotes' refs (whose commits are fetched). What no source holds is reported, never guessed.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

from dulwich.objects import Commit, ShaFile, Tag
from dulwich.reflog import format_reflog_line, parse_reflog_line
from dulwich.refs import check_ref_format

from mgit.durable import atomic_write
from mgit.errors import CorruptObjectError, MgitError
from mgit.graph.ids import ref_name
from mgit.graph.integrity import RefScan, read_object, scan_refs, valid_ref_value
from mgit.graph.objects import Graph
from mgit.maintenance.fsck import damaged_objects
from mgit.maintenance.reach import ZERO, reachable, reflog_lines
from mgit.remote.backend import Backend, children, object_key, unpack_object
from mgit.worktree.index import Index

HEADS = "refs/heads/"
TRACKING = "refs/remotes/"
PACKED_HEADER = b"# pack-refs with: peeled fully-peeled sorted "  # as git writes it


@dataclass
class GraphRepair:
    """What the git side of a repair did."""

    objects: dict[str, str] = field(default_factory=dict)  # restored object id → remote it came from
    objects_lost: dict[str, str] = field(default_factory=dict)  # object id → who needs it (no remote has it)
    refs: dict[str, str] = field(default_factory=dict)  # restored ref → where its value came from
    refs_lost: dict[str, str] = field(default_factory=dict)  # ref → why it is still damaged
    reflog_lines: int = 0  # unreadable reflog lines dropped
    index_stats: list[str] = field(default_factory=list)  # paths whose lost staged statistics were dropped
    removed: list[str] = field(default_factory=list)  # damaged objects nothing reaches, deleted
    packed_lines: list[str] = field(default_factory=list)  # packed-refs lines naming no readable ref, dropped


class Remotes:
    """The configured remotes, each opened when first needed; one that cannot be reached
    or answers with damage is skipped (another may hold what is wanted)."""

    def __init__(self, openers: dict[str, Callable[[], Backend]]):
        self._openers = dict(sorted(openers.items()))
        self._open: dict[str, Backend | None] = {}
        self._refs: dict[str, dict[str, str]] = {}

    @property
    def names(self) -> list[str]:
        return list(self._openers)

    def backend(self, name: str) -> Backend | None:
        if name not in self._open:
            try:
                self._open[name] = self._openers[name]()
            except (MgitError, OSError):
                self._open[name] = None
        return self._open[name]

    def get_object(self, sha: str, prefer: str | None = None) -> tuple[str, ShaFile] | None:
        """(remote, object) from the first remote holding ``sha`` intact."""
        for name in sorted(self._openers, key=lambda n: n != prefer):
            backend = self.backend(name)
            if backend is None:
                continue
            try:
                return name, unpack_object(sha, backend.get(object_key(sha)))
            except (MgitError, OSError):
                continue
        return None

    def refs(self, name: str) -> dict[str, str]:
        if name not in self._refs:
            backend = self.backend(name)
            try:
                self._refs[name] = backend.refs() if backend is not None else {}
            except (MgitError, OSError):
                self._refs[name] = {}
        return self._refs[name]

    def close(self) -> None:
        for backend in self._open.values():
            if backend is not None:
                backend.close()


def write_loose(graph: Graph, obj: ShaFile) -> None:
    """Store ``obj`` as a loose object, replacing a damaged file of that id atomically."""
    sha = obj.id.decode()
    path = graph.git_dir / "objects" / sha[:2] / sha[2:]
    atomic_write(path, obj.as_legacy_object(), mode=0o444, tmp_name=f".tmp-{sha[2:]}-{os.getpid()}")


def _intact(graph: Graph, sha: str) -> bool:
    try:
        read_object(graph.objects, sha)
        return True
    except (KeyError, CorruptObjectError):
        return False


def _fetch_below(
    graph: Graph,
    remotes: Remotes,
    wanted: dict[str, str],
    report: GraphRepair,
    prefer: str | None = None,
    damaged: frozenset[str] | set[str] = frozenset(),
) -> None:
    """Fetch every object of ``wanted`` (id → who needs it) that is absent or damaged here
    (``damaged``: found so by full verification, though it may read), and whatever is
    absent below the fetched ones (a restored tree's lost children)."""
    pending = list(wanted.items())
    while pending:
        sha, who = pending.pop()
        if sha in report.objects or sha in report.objects_lost or (sha not in damaged and _intact(graph, sha)):
            continue
        got = remotes.get_object(sha, prefer)
        if got is None:
            report.objects_lost[sha] = who
            continue
        name, obj = got
        write_loose(graph, obj)
        report.objects[sha] = name
        pending += [(c, f"{obj.type_name.decode()} {sha[:12]}") for c in children(obj) if not graph.has(c)]


def restore_objects(graph: Graph, index: Index | None, remotes: Remotes, report: GraphRepair) -> None:
    """Every damaged git object, and every one the history needs and lacks, from the remotes."""
    reach = reachable(graph, index)
    damaged = {sha: reach.where.get(sha, "nothing known") for sha in damaged_objects(graph) if len(sha) == 40}
    absent = {o: reach.where.get(o, "a file") for o in reach.objects if not graph.has(o)}
    _fetch_below(graph, remotes, {**damaged, **absent, **reach.lacking}, report, damaged=set(damaged))
    if report.objects:  # what the restored objects reach was not walked before
        reach = reachable(graph, index)
        absent = {o: reach.where.get(o, "a file") for o in reach.objects if not graph.has(o)}
        _fetch_below(graph, remotes, {**absent, **reach.lacking}, report)
    for sha in list(report.objects_lost):
        if sha not in damaged and _intact(graph, sha):
            del report.objects_lost[sha]


# -- refs -----------------------------------------------------------------------------------


def _write_ref(git_dir: Path, ref: str, value: str, identity: bytes, source: str) -> None:
    """Write a ref file atomically (a damaged file cannot go through dulwich's compare-and-swap)
    and note the restore in its reflog."""
    atomic_write(git_dir / ref, value.encode() + b"\n")
    if value.startswith("ref: ") or not (ref == "HEAD" or ref.startswith(HEADS)):
        return
    log = git_dir / "logs" / ref
    log.parent.mkdir(parents=True, exist_ok=True)
    message = f"fsck: restored from {source}".encode()
    line = format_reflog_line(None, value.encode(), identity, int(time.time()), 0, message)
    with open(log, "ab") as f:
        f.write(line + b"\n")


def _from_reflog(graph: Graph, ref: str) -> str | None:
    path = graph.git_dir / "logs" / ref
    if not path.is_file():
        return None
    for entry in reversed(reflog_lines(path)[0]):
        sha: str = entry.new_sha.decode()  # dulwich's reflog Entry is an untyped namedtuple
        if set(sha) != {"0"} and _is_commit(graph, sha):
            return sha
    return None


def _is_commit(graph: Graph, sha: str) -> bool:
    try:
        return isinstance(read_object(graph.objects, sha), (Commit, Tag))
    except (KeyError, CorruptObjectError):
        return False


def _candidate(graph: Graph, scan: RefScan, ref: str, remotes: Remotes, report: GraphRepair) -> tuple[str, str] | None:
    """(value, where it came from) for a damaged ``ref``: its reflog, then a remote-tracking
    ref of the same branch, then the remotes (fetching the commit's graph from there)."""
    sha = _from_reflog(graph, ref)
    if sha is not None:
        return sha, "its reflog"
    if ref.startswith(HEADS):
        branch = ref.removeprefix(HEADS)
        for name in remotes.names:
            tracking = f"{TRACKING}{name}/{branch}"
            if tracking in scan.values and _is_commit(graph, scan.values[tracking]):
                return scan.values[tracking], tracking
    for name in remotes.names:
        if ref.startswith(f"{TRACKING}{name}/"):
            theirs = f"{HEADS}{ref.removeprefix(f'{TRACKING}{name}/')}"
        elif ref.startswith((HEADS, "refs/tags/")):
            theirs = ref
        else:
            continue
        sha = remotes.refs(name).get(theirs)
        if sha is None:
            continue
        _fetch_below(graph, remotes, {sha: f"{theirs} of remote {name}"}, report, prefer=name)
        if _is_commit(graph, sha):
            return sha, f"remote {name}"
    return None


def _head_candidate(graph: Graph, branches: dict[str, str]) -> tuple[str, str]:
    """What a damaged HEAD held: the branch its reflog last moved to (or the only branch
    whose tip its last entry names), else a detached HEAD there, else main."""
    path = graph.git_dir / "logs" / "HEAD"
    entries = reflog_lines(path)[0] if path.is_file() else []
    moved_to = None
    for entry in reversed(entries):
        m = re.fullmatch(rb"checkout: moving to (.+)", entry.message.strip())
        if m and f"{HEADS}{m.group(1).decode(errors='replace')}" in branches:
            moved_to = f"{HEADS}{m.group(1).decode()}"
            break
    last = entries[-1].new_sha.decode() if entries else None
    at_last = [ref for ref, sha in branches.items() if sha == last]
    if moved_to is not None and (branches[moved_to] == last or not at_last):
        return f"ref: {moved_to}", "its reflog"
    if len(at_last) == 1:
        return f"ref: {at_last[0]}", "its reflog"
    if last is not None and _is_commit(graph, last):
        return last, "its reflog (detached)"
    if len(branches) == 1:
        return f"ref: {next(iter(branches))}", "the only branch"
    return f"ref: {HEADS}main", "the default branch"


def _rewrite_packed_refs(git_dir: Path) -> None:
    """``packed-refs`` without its unreadable lines (the refs they held are restored as loose refs)."""
    path = git_dir / "packed-refs"
    keep, last_ok = [PACKED_HEADER], False
    for line in path.read_bytes().splitlines():
        if line.startswith(b"^"):
            if last_ok and valid_ref_value(line[1:]):
                keep.append(line)
        elif not line.startswith(b"#"):
            sha, _, name = line.partition(b" ")
            last_ok = valid_ref_value(sha) and name.startswith(b"refs/") and check_ref_format(ref_name(name))
            if last_ok:
                keep.append(line)
    atomic_write(path, b"".join(x + b"\n" for x in keep))


def _clean_reflogs(graph: Graph) -> int:
    """Drop reflog lines that cannot be read or name an object that is not here (the remotes
    were asked for it before): as ``git reflog expire --stale-fix`` does. Returns how many."""
    dropped = 0
    for dirpath, _, names in os.walk(graph.git_dir / "logs"):
        for name in names:
            path = Path(dirpath) / name
            lines = path.read_bytes().splitlines(keepends=True)
            keep = [line for line in lines if _reflog_line_ok(graph, line)]
            if len(keep) == len(lines):
                continue
            atomic_write(path, b"".join(keep))
            dropped += len(lines) - len(keep)
    return dropped


def _reflog_line_ok(graph: Graph, line: bytes) -> bool:
    try:
        entry = parse_reflog_line(line.rstrip(b"\n"))
    except Exception:
        return False
    shas = [s.decode(errors="replace") for s in (entry.old_sha, entry.new_sha)]
    return all(s == ZERO or (re.fullmatch(r"[0-9a-f]{40}", s) and graph.has(s)) for s in shas)


def _read_head(git_dir: Path) -> str | None:
    """The branch a readable symbolic HEAD names (None: detached or unreadable)."""
    try:
        value = (git_dir / "HEAD").read_bytes().split(b"\n", 1)[0]
    except OSError:
        return None
    return value[5:].decode() if value.startswith(b"ref: ") and check_ref_format(ref_name(value[5:])) else None


def restore_refs(graph: Graph, remotes: Remotes, identity: bytes, report: GraphRepair) -> None:
    """Every damaged ref, or ref naming a missing commit, restored where a source holds it."""
    git_dir = graph.git_dir
    report.reflog_lines += _clean_reflogs(graph)
    scan = scan_refs(git_dir)
    broken = dict(scan.damaged)
    for ref, sha in scan.values.items():
        if ref not in scan.symrefs and not _is_commit(graph, sha):
            broken[ref] = f"points at {sha[:12]}, which is missing or damaged"
    if scan.packed_damaged:
        _rewrite_packed_refs(git_dir)
    for ref in sorted(r for r in broken if r != "HEAD"):
        if ref.startswith("packed-refs"):  # no ref name can be read from it: rewritten without it
            report.packed_lines.append(ref)
            continue
        found = _candidate(graph, scan, ref, remotes, report)
        if found is None:
            drop = f"; delete .mgit/{ref} to drop it" if (git_dir / ref).is_file() else ""
            report.refs_lost[ref] = f"{broken[ref]} (no reflog entry, remote-tracking ref or remote has it{drop})"
            continue
        _write_ref(git_dir, ref, found[0], identity, found[1])
        report.refs[ref] = found[1]
    head = _read_head(git_dir)
    if "HEAD" in broken and head and head.startswith(HEADS):  # HEAD names a lost branch: restore the branch
        found = _candidate(graph, scan, head, remotes, report)
        if found is not None:
            _write_ref(git_dir, head, found[0], identity, found[1])
            report.refs[head] = found[1]
            broken.pop("HEAD")
    if "HEAD" in broken:
        after = scan_refs(git_dir)
        branches = {r: s for r, s in after.values.items() if r.startswith(HEADS) and _is_commit(graph, s)}
        if "HEAD" in scan.damaged:
            value, source = _head_candidate(graph, branches)
        else:  # a detached HEAD naming a lost commit
            logged = _from_reflog(graph, "HEAD")
            value, source = (logged, "its reflog") if logged else _head_candidate(graph, branches)
        _write_ref(git_dir, "HEAD", value, identity, source)
        report.refs["HEAD"] = source


def settle(graph: Graph, index: Index | None, report: GraphRepair) -> None:
    """Forget lost objects nothing needs any more (a restored ref moved off them); a damaged
    one nothing reaches is garbage no command can read: it is removed."""
    if not report.objects_lost:
        return
    reach = reachable(graph, index)
    damaged = damaged_objects(graph)
    needed = {**{o: reach.where.get(o, "a file") for o in reach.objects if not graph.has(o)}, **reach.lacking}
    lost = {}
    for sha, who in report.objects_lost.items():
        if sha in needed or (sha in damaged and sha in reach.objects):
            lost[sha] = reach.where.get(sha, needed.get(sha, who))
        elif sha in damaged:
            (graph.git_dir / "objects" / sha[:2] / sha[2:]).unlink(missing_ok=True)
            report.removed.append(sha)
    report.objects_lost = lost


def drop_lost_index_stats(index: Index, report: GraphRepair) -> None:
    """A staged file's relative statistics are derived data that never leave this repository:
    when their blob is lost, the index stops naming it (a commit then records no statistics
    for that file, which merge planning estimates instead) rather than stay damaged."""
    lost = set(report.objects_lost)
    paths = [p for p, ie in index.entries.items() if ie.stats in lost]
    if not paths:
        return
    for path in paths:  # the blob, now unreachable, is removed by settle
        index.entries[path] = replace(index.entries[path], stats=None)
    index.save()
    report.index_stats += sorted(paths)
