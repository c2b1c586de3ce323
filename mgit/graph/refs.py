"""Branches, tags and HEAD, with compare-and-swap updates and reflogs (dulwich refs)."""

from __future__ import annotations

import os
import re
import time
from collections.abc import Iterable
from pathlib import Path

from dulwich.file import GitFile
from dulwich.objects import Commit, Tag
from dulwich.objectspec import parse_commit
from dulwich.reflog import Entry, format_reflog_line
from dulwich.refs import SYMREF, check_ref_format

from mgit.dirs import prune_dirs
from mgit.errors import BadInputError, CorruptObjectError, RefUpdateError, RevisionError
from mgit.graph.ids import object_id, ref_name
from mgit.graph.integrity import REPAIR_HINT, read_reflog_checked
from mgit.graph.objects import Graph, local_offset
from mgit.graph.reflogs import bury, graves, is_grave, unbury
from mgit.graph.walks import is_ancestor

HEADS = "refs/heads/"
TAGS = "refs/tags/"
REMOTES = "refs/remotes/"


def check_ref_name(name: str, what: str) -> str:
    from dulwich.refs import check_ref_format

    if not name or name.startswith("-") or not check_ref_format(ref_name(f"{HEADS}{name}".encode())):
        raise BadInputError(f"invalid {what} name {name!r}")
    return name


def ref_clash(name: str, existing: Iterable[str]) -> str | None:
    """The existing ref that ``name`` would lie under or hold under it (git stores refs as
    files: ``refs/heads/a`` and ``refs/heads/a/b`` cannot both exist), or None."""
    for other in sorted(existing):
        if other != name and (other.startswith(name + "/") or name.startswith(other + "/")):
            return other
    return None


def clash_message(name: str, other: str) -> str:
    return f"cannot create {name}: it clashes with the existing ref {other}"


class Refs:
    def __init__(self, graph: Graph, identity: bytes):
        self.graph = graph
        self.refs = graph.repo.refs
        self.identity = identity

    def current_branch(self) -> str | None:
        """The branch HEAD points to (it may be unborn), or None when detached."""
        head = self.refs.read_loose_ref(ref_name(b"HEAD"))  # HEAD alone: another damaged ref is not in the way
        target = head[len(SYMREF) :] if head and head.startswith(SYMREF) else None
        if target and target.startswith(HEADS.encode()):
            return target[len(HEADS) :].decode()
        return None

    def head(self) -> str | None:
        """The commit HEAD resolves to, or None on an unborn branch."""
        try:
            return self.refs[ref_name(b"HEAD")].decode()
        except KeyError:
            return None

    def branches(self) -> dict[str, str]:
        return {k.decode(): v.decode() for k, v in self.refs.as_dict(ref_name(HEADS.encode())).items()}

    def tags(self) -> dict[str, str]:
        out = {}
        for k, v in self.refs.as_dict(ref_name(TAGS.encode())).items():
            obj = self.graph.read(v.decode())
            out[k.decode()] = (obj.object[1] if isinstance(obj, Tag) else v).decode()
        return out

    def refuse_clash(self, ref: str) -> None:
        """One line, before anything is written, for a new ref clashing with an existing one."""
        other = ref_clash(ref, (k.decode(errors="replace") for k in self.refs.allkeys() if k != b"HEAD"))
        if other is not None:
            raise BadInputError(clash_message(ref, other))

    def _cas(self, ref: str, old: str | None, new: str, message: str) -> None:
        """Move ``ref`` from ``old`` to ``new``; ``old=None`` means the ref must not exist yet."""
        if old is None:
            ok = self.refs.add_if_new(
                ref_name(ref.encode()), object_id(new.encode()), committer=self.identity, message=message.encode()
            )
        else:
            ok = self.refs.set_if_equals(
                ref_name(ref.encode()),
                object_id(old.encode()),
                object_id(new.encode()),
                committer=self.identity,
                message=message.encode(),
            )
        if not ok:
            raise RefUpdateError(f"{ref} moved while this command ran; nothing was changed, run it again")

    def advance_head(self, old: str | None, new: str, message: str) -> None:
        """Move the current branch (or a detached HEAD) from old to new, atomically."""
        branch = self.current_branch()
        self._cas(f"{HEADS}{branch}" if branch else "HEAD", old, new, message)
        if branch:
            self.log_head(old, new, message)

    def advance_branch(self, name: str, old: str, new: str, message: str) -> None:
        """Move a branch that is not checked out from old to new, atomically (HEAD stays)."""
        self._cas(f"{HEADS}{name}", old, new, message)

    def log_head(self, old: str | None, new: str, message: str) -> None:
        """Append to HEAD's reflog, as git does for every move of HEAD (dulwich only logs
        the branch a symbolic HEAD points to); it keeps deleted branches' commits reachable."""
        now = int(time.time())
        line = format_reflog_line(
            old.encode() if old else None, new.encode(), self.identity, now, local_offset(now), message.encode()
        )
        path = self.graph.git_dir / "logs" / "HEAD"
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "ab") as f:
            f.write(line + b"\n")

    def create_branch(self, name: str, commit: str) -> None:
        check_ref_name(name, "branch")
        ref = f"{HEADS}{name}"
        if ref_name(ref.encode()) in self.refs:
            raise BadInputError(f"branch {name!r} already exists")
        self.refuse_clash(ref)
        self._cas(ref, None, commit, f"branch: created from {commit[:12]}")

    def delete_branch(self, name: str, force: bool = True) -> str:
        """Delete a branch (returns the commit it held); ``force=False`` (``branch -d``) refuses
        one whose commits neither HEAD nor its upstream reaches, as git does. Its reflog is kept
        (mgit.graph.reflogs)."""
        if name == self.current_branch():
            raise BadInputError(f"cannot delete branch {name!r}: it is checked out; switch to another branch first")
        ref = ref_name(f"{HEADS}{name}".encode())
        if ref not in self.refs:
            raise BadInputError(f"branch {name!r} not found")
        if not force and not self._merged(name, self.refs[ref].decode()):
            raise BadInputError(
                f"the branch {name!r} is not fully merged; if you are sure you want to delete it, "
                f"run `mgit branch -D {name}`"
            )
        tip = self.refs[ref].decode()
        # unlike git, the reflog is kept (and its commits with it) until `reflog expire`:
        # a branch that never was HEAD (merge -b --no-checkout) is in no other reflog
        grave = bury(self.graph.git_dir, name, tip, self.identity, f"branch: deleted {name} (was {tip[:12]})")
        try:
            if not self.refs.remove_if_equals(ref, object_id(tip.encode())):
                raise RefUpdateError(
                    f"branch {name!r} moved while it was being deleted; nothing was deleted, run it again"
                )
        except BaseException:
            unbury(self.graph.git_dir, grave)  # the branch stays, and keeps its reflog
            raise
        return tip

    def _merged(self, name: str, commit: str) -> bool:
        """Whether HEAD or the branch's upstream (``refs/remotes/R/name``, which push and
        fetch record) reaches ``commit``."""
        tips = [self.head()] + [
            sha for tracked, sha in self.remote_branches().items() if tracked.partition("/")[2] == name
        ]
        return any(tip is not None and is_ancestor(self.graph, commit, tip) for tip in tips)

    def force_branch(self, name: str, commit: str, what: str) -> None:
        """``branch -f``: create ``name`` at ``commit`` or move it there, whatever it held; the
        checked-out branch only to the commit it already holds (as git: use reset to move it)."""
        check_ref_name(name, "branch")
        ref = f"{HEADS}{name}"
        old = self.refs.as_dict(ref_name(HEADS.encode())).get(ref_name(name.encode()))
        if old is None:
            self.refuse_clash(ref)
            self._cas(ref, None, commit, f"branch: Created from {what}")
            return
        if name == self.current_branch() and old.decode() != commit:
            raise BadInputError(
                f"cannot force-update the checked-out branch {name!r}; use `mgit reset {what}` to move it"
            )
        self._cas(ref, old.decode(), commit, f"branch: Reset to {what}")

    def rename_branch(self, old: str, new: str, force: bool = False) -> None:
        """``branch -m``: the ref and its reflog move to the new name; HEAD follows when it
        pointed to the old one. ``force`` (``-M``): an existing ``new`` is replaced, ref and
        reflog (not the checked-out branch); renaming a branch onto itself does nothing."""
        check_ref_name(new, "branch")
        old_ref, new_ref = f"{HEADS}{old}", f"{HEADS}{new}"
        branches = self.refs.as_dict(ref_name(HEADS.encode()))
        commit = branches.get(ref_name(old.encode()))
        if commit is None:
            raise BadInputError(f"branch {old!r} not found")
        replaced = branches.get(ref_name(new.encode()))
        if force and old == new:
            return
        if (replaced is not None and not force) or any(b.startswith(f"{new}/") for b in self.branches()):
            raise BadInputError(f"branch {new!r} already exists")
        if replaced is not None and new == self.current_branch():
            raise BadInputError(
                f"cannot force-rename onto the checked-out branch {new!r}; switch to another branch first"
            )
        self.refuse_clash(new_ref)
        logs = self.graph.git_dir / "logs"
        old_log, new_log = logs / old_ref, logs / new_ref
        grave = None
        if replaced is not None:  # its history is not the renamed one's: kept apart, as a deleted branch's
            grave = bury(self.graph.git_dir, new, replaced.decode(), self.identity, f"branch: replaced by {old}")
        moved = old_log.is_file()
        if moved:
            new_log.parent.mkdir(parents=True, exist_ok=True)
            os.replace(old_log, new_log)  # before the new ref moves: its first entry lands after the history
        message = f"Branch: renamed {old_ref} to {new_ref}"
        try:
            self._cas(new_ref, replaced.decode() if replaced else None, commit.decode(), message)
        except BaseException:  # nothing renamed: each reflog goes back to its branch
            if moved:
                os.replace(new_log, old_log)
                prune_dirs(logs / "refs" / "heads", new)
            if grave is not None:
                unbury(self.graph.git_dir, grave)
            raise
        current = self.current_branch() == old
        if current:
            self.refs.set_symbolic_ref(ref_name(b"HEAD"), ref_name(new_ref.encode()))
            self.log_head(commit.decode(), commit.decode(), message)
        if not self.refs.remove_if_equals(ref_name(old_ref.encode()), commit):
            raise RefUpdateError(
                f"branch {old!r} moved while it was renamed: {new!r} holds what it held, {old!r} stays"
            )
        old_log.unlink(missing_ok=True)
        prune_dirs(logs / "refs" / "heads", old)

    def remote_branches(self) -> dict[str, str]:
        """Remote-tracking branches: ``origin/main`` → commit (refs/remotes/<remote>/<branch>)."""
        tracking: Iterable[tuple[bytes, bytes]] = self.refs.as_dict(ref_name(REMOTES.encode())).items()
        return {k.decode(): v.decode() for k, v in tracking if not k.endswith(b"/HEAD") and b"/" in k}

    def tag_refs(self) -> dict[str, str]:
        """Tag name → the id its ref holds: the commit, or an annotated tag's tag object."""
        return {k.decode(): v.decode() for k, v in self.refs.as_dict(ref_name(TAGS.encode())).items()}

    def tag_message(self, name: str) -> str | None:
        """An annotated tag's message as given (git ends it with a newline; None: a lightweight tag)."""
        obj = self.graph.read(self.tag_refs()[name])
        return obj.message.decode("utf-8", "replace").removesuffix("\n") if isinstance(obj, Tag) else None

    def create_tag(self, name: str, commit: str, message: str | None = None) -> None:
        """Tag ``commit``: lightweight (the ref holds the commit), or with ``message`` annotated
        (a git tag object with tagger, time and message, as ``git tag -a``)."""
        check_ref_name(name, "tag")
        ref = ref_name(f"{TAGS}{name}".encode())
        if ref in self.refs:
            raise BadInputError(f"tag {name!r} already exists")
        self.refuse_clash(ref.decode())
        target = commit if message is None else self.graph.put_tag(name, commit, message, self.identity)
        if not self.refs.add_if_new(ref, object_id(target.encode())):
            raise BadInputError(f"tag {name!r} already exists")

    def delete_tag(self, name: str) -> None:
        ref = ref_name(f"{TAGS}{name}".encode())
        if ref not in self.refs:
            raise BadInputError(f"tag {name!r} not found")
        self.refs.remove_if_equals(ref, None)

    def point_head_at_branch(self, name: str) -> None:
        old = self.head()
        self.refs.set_symbolic_ref(ref_name(b"HEAD"), ref_name(f"{HEADS}{name}".encode()))
        new = self.head()
        if new:
            self.log_head(old, new, f"checkout: moving to {name}")

    def detach_head(self, commit: str) -> None:
        old = self.head()
        # replace the file in one rename: removing HEAD first (setting it follows the symref)
        # would leave no HEAD, hence no repository, to a command killed in between
        with GitFile(self.graph.git_dir / "HEAD", "wb") as f:
            f.write(commit.encode() + b"\n")
        self.log_head(old, commit, f"checkout: moving to {commit}")

    def resolve(self, rev: str) -> str:
        """A revision (branch, tag, id or abbreviation, REF@{N}, HEAD~N, REV^N) → commit id.

        dulwich's parse_commit resolves the base name (refs, abbreviated ids); reflog
        positions and the ancestry suffixes are applied here so they work after any base.
        """
        match = _SUFFIXES.match(rev or "")
        if not rev or rev.startswith("-") or not match or not (match.group(1) or match.group(2)):
            raise RevisionError(f"invalid revision {rev!r}")
        base, position, suffixes = match.group(1), match.group(3), match.group(4)
        if match.group(2):
            commit = self._parent(self._reflog_position(rev, base, position).encode())
        else:
            commit = self._base(rev, base)
        for op, digits in re.findall(r"([~^])(\d*)", suffixes):
            n = int(digits) if digits else 1
            if op == "^":
                if n == 0:
                    continue
                if n > len(commit.parents):
                    raise RevisionError(f"revision {rev!r}: commit {commit.id.decode()[:12]} has no parent {n}")
                commit = self._parent(commit.parents[n - 1])
            else:
                for _ in range(n):
                    if not commit.parents:
                        raise RevisionError(f"revision {rev!r} goes back beyond the first commit")
                    commit = self._parent(commit.parents[0])
        return commit.id.decode()

    def _base(self, rev: str, base: str) -> Commit:
        try:
            return parse_commit(self.graph.repo, base.encode())
        except Exception:
            self._check_named(base)  # a ref or id naming a damaged or missing object says so
            if base == "HEAD" and self.head() is None:
                raise RevisionError("HEAD has no commits yet; make a first commit with `mgit commit`") from None
            raise RevisionError(f"unknown revision {rev!r}: not a branch, tag or commit of this repository") from None

    def _reflog_position(self, rev: str, base: str, position: str) -> str:
        """``REF@{N}``: where REF was N moves ago (its reflog's N-th entry, newest first, as
        git). A bare ``@{N}`` reads the current branch's reflog (HEAD's when detached)."""
        if not position.isdigit():
            raise RevisionError(f"invalid revision {rev!r}: mgit reads reflog positions, REF@{{N}} (N = 0, 1, …)")
        branch = self.current_branch()
        full = reflog_ref(self.graph.git_dir, self, base) if base else f"{HEADS}{branch}" if branch else "HEAD"
        entries = reflog_entries(self.graph.git_dir, full)
        n = int(position)
        if not entries and full.startswith(TAGS):
            raise RevisionError(f"revision {rev!r}: {full} has no reflog (tags keep none, as in git)")
        if n >= len(entries):
            count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
            raise RevisionError(f"revision {rev!r}: the reflog of {full} has only {count} ({base}@{{0}} is the newest)")
        new_sha: bytes = entries[-1 - n].new_sha  # dulwich's reflog Entry is an untyped namedtuple
        new = new_sha.decode()
        if set(new) == {"0"}:
            raise RevisionError(f"revision {rev!r}: {full} was deleted at that point of its reflog")
        return new

    def _parent(self, sha: bytes) -> Commit:
        """The commit a reflog entry or a commit's parent names; anything else there is damage."""
        try:
            obj = self.graph.read(sha.decode())
        except KeyError:
            missing = f"commit {sha[:12].decode()} is missing from the repository"
            raise CorruptObjectError(missing + REPAIR_HINT) from None
        if not isinstance(obj, Commit):
            raise CorruptObjectError(f"object {sha[:12].decode()} is not a commit")
        return obj

    def _check_named(self, base: str) -> None:
        """CorruptObjectError when ``base`` is a ref (or full id) whose object is damaged or
        missing: that is no unknown revision, and the fix is a repair, not another name."""
        for ref in (base, f"refs/{base}", f"{HEADS}{base}", f"{TAGS}{base}", f"refs/remotes/{base}"):
            if not check_ref_format(ref_name(ref.encode())) and ref != "HEAD":
                continue
            try:
                sha = self.refs[ref_name(ref.encode())].decode()
            except KeyError:
                continue
            try:
                self.graph.read(sha)
            except KeyError:
                raise CorruptObjectError(f"{ref} points at {sha[:12]}, which is missing{REPAIR_HINT}") from None
            return
        if re.fullmatch(r"[0-9a-f]{40}", base) and self.graph.has(base):
            self.graph.read(base)


_SUFFIXES = re.compile(r"^(.*?)(@\{([^{}]*)\})?((?:[~^]\d*)*)$")  # base, @{N}, ~N / ^N


def reflog_entries(git_dir: Path, ref: str = "HEAD") -> list[Entry]:
    """The reflog of ``ref`` (HEAD, refs/heads/NAME, …), oldest first; empty if it has none."""
    path = Path(git_dir) / "logs" / ref
    if not path.is_file():
        return []
    return read_reflog_checked(path, f"logs/{ref}")


def reflog_ref(git_dir: Path, refs: Refs, name: str) -> str:
    """The full ref a reflog name means, as git spells it out: ``HEAD``, then
    ``refs/NAME``, ``refs/tags/NAME``, ``refs/heads/NAME``, ``refs/remotes/NAME`` and
    ``refs/remotes/NAME/HEAD`` (so ``main``, ``v1`` and ``origin/main`` work); the first that
    is a ref or has a reflog; else a deleted branch's kept reflog (mgit.graph.reflogs), the
    newest. Unknown names are refused."""
    from dulwich.refs import check_ref_format

    if name == "HEAD":
        return name
    candidates = [name, f"refs/{name}", f"{TAGS}{name}", f"{HEADS}{name}", f"refs/remotes/{name}"]
    candidates.append(f"refs/remotes/{name}/HEAD")
    present = refs.refs.allkeys()
    for full in candidates:
        if not full.startswith("refs/") or not check_ref_format(ref_name(full.encode())):
            continue
        if ref_name(full.encode()) in present or (Path(git_dir) / "logs" / full).is_file():
            return full
    kept = graves(git_dir, name.removeprefix(HEADS))
    if kept:  # a deleted branch: its newest kept reflog
        return kept[-1]
    raise RevisionError(f"unknown ref {name!r} (a branch, tag, remote-tracking branch such as origin/main, or HEAD)")


def expire_reflogs(git_dir: Path, before: float | None) -> int:
    """Drop reflog entries older than ``before`` (seconds since the epoch; None: every entry);
    each reflog is rewritten to a temporary file and renamed over the old one, so a killed
    expiry leaves every reflog whole. Returns how many entries went. Commits they kept alive
    stay only if a ref or the index still reaches them: gc may then reclaim the rest."""
    dropped = 0
    logs = Path(git_dir) / "logs"
    for dirpath, _, names in os.walk(logs):
        for name in names:
            path = Path(dirpath) / name
            if ".tmp-" in name:
                continue
            entries = read_reflog_checked(path, path.relative_to(git_dir).as_posix())
            keep = [e for e in entries if before is not None and e.timestamp >= before]
            if len(keep) == len(entries):
                continue
            dropped += len(entries) - len(keep)
            if not keep and is_grave(path.relative_to(logs).as_posix()):
                path.unlink()  # a deleted branch's reflog emptied: nothing of it is left to keep
                prune_dirs(logs, path.relative_to(logs))
                continue
            tmp = path.with_name(f"{name}.tmp-{os.getpid()}")
            with open(tmp, "wb") as f:
                for e in keep:
                    f.write(format_reflog_line(e.old_sha, e.new_sha, e.committer, e.timestamp, e.timezone, e.message))
                    f.write(b"\n")
            os.replace(tmp, path)
    return dropped
