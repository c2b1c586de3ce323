"""The object graph: a real git repository (written with dulwich) holding commits,
trees, refs, tags and small blobs such as manifests. ``git --git-dir=.mgit log`` works.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar, cast

from dulwich.file import adjust_shared_perm
from dulwich.object_store import PACK_MODE, BaseObjectStore, DiskObjectStore
from dulwich.objects import Blob, Commit, ShaFile, Tag, Tree
from dulwich.refs import DiskRefsContainer
from dulwich.repo import BaseRepo, ParentsProvider, Repo
from dulwich.walk import Walker

from mgit import config
from mgit.durable import pwrite_all
from mgit.errors import CorruptObjectError
from mgit.graph.ids import object_id
from mgit.graph.integrity import HEX40, REPAIR_HINT, checked_refs, read_object

_CACHE_OBJECTS = 50_000
MODE_TREE = 0o040000
MODE_FILE = 0o100644
MODE_EXEC = 0o100755

_Object = TypeVar("_Object", bound=ShaFile)
# a loose object's temporary file, beside it: what mgit.maintenance.gc sweeps as a leftover
LOOSE_TMP_PREFIX = ".tmp-"


@dataclass(frozen=True)
class CommitInfo:
    id: str
    tree: str
    parents: tuple[str, ...]
    author: str
    committer: str
    time: int  # the committer's time and timezone (what git's --since reads)
    timezone: int
    message: str
    author_time: int
    author_timezone: int

    @property
    def summary(self) -> str:
        return self.message.strip().splitlines()[0] if self.message.strip() else ""


def local_offset(t: float) -> int:
    """The local time zone's offset from UTC at time ``t`` in seconds east (summer time
    included), which git records beside every time it stamps: commits, tags, reflog entries."""
    return time.localtime(t).tm_gmtoff


class Graph:
    """Blobs, trees and commits in the git repository at ``git_dir``."""

    def __init__(self, git_dir: Path):
        self.git_dir = Path(git_dir)
        self.repo = config.checked(self.git_dir / "config", lambda: Repo(str(git_dir)))  # a damaged config: one line
        refs = self.repo.refs
        assert isinstance(refs, DiskRefsContainer)  # a repository on disk that mgit made: loose refs, packed-refs
        self.repo.refs = checked_refs(refs)  # a damaged ref: one line naming it
        self.objects = self.repo.object_store
        # Objects are immutable and content-addressed, so caching them is always correct;
        # it saves re-reading manifests that several steps of one command need.
        self._cache: dict[str, ShaFile] = {}

    @classmethod
    def init(cls, git_dir: Path) -> Graph:
        Path(git_dir).mkdir(parents=True, exist_ok=True)
        Repo.init_bare(str(git_dir), default_branch=b"main")
        return cls(git_dir)

    def _get(self, sha: str, kind: type[_Object], what: str) -> _Object:
        try:
            stored = self.checked(sha)
        except KeyError:
            raise CorruptObjectError(f"{what} {sha[:12]} is missing from the repository{REPAIR_HINT}") from None
        if not isinstance(stored, kind):
            raise CorruptObjectError(f"object {sha[:12]} is not a {what}")
        return stored

    def prefetch(self, shas: Iterable[str]) -> None:
        """Ask the kernel to read the loose objects ``shas`` ahead (``posix_fadvise``
        WILLNEED), so that the caller's reads, one after another, find them in the page cache:
        on a cold cache each loose object is a random read, and waiting for thousands one at a
        time costs ~0.1 ms each. Only a hint: errors are left for the caller's read to report."""
        root = self.objects.path if isinstance(self.objects, DiskObjectStore) else None
        if root is None or not hasattr(os, "posix_fadvise"):
            return
        for sha in dict.fromkeys(shas):
            if sha not in self._cache and HEX40.fullmatch(sha):  # an id, not a path
                _advise_whole(os.path.join(root, sha[:2], sha[2:]))

    def cached(self, sha: str) -> bool:
        """Whether object ``sha`` was read already (it is in this graph's cache): reading it
        again costs no I/O."""
        return sha in self._cache

    def _add(self, obj: Blob | Tree | Commit | Tag) -> None:
        try:
            if isinstance(self.objects, DiskObjectStore):
                _write_loose(self.objects, obj)
            else:  # pragma: no cover - mgit opens only repositories on disk
                self.objects.add_object(obj)
        except OSError as exc:  # a full disk: name where the object was going
            if exc.filename is not None:
                raise
            raise OSError(exc.errno, exc.strerror, str(self.git_dir / "objects" / obj.id.decode()[:2])) from None

    def put_blob(self, data: bytes) -> str:
        blob = Blob.from_string(data)
        self._add(blob)
        return blob.id.decode()

    def blob(self, sha: str) -> bytes:
        return self._get(sha, Blob, "blob").as_raw_string()

    def has(self, sha: str) -> bool:
        """Whether the object is stored here (damaged or not: reading a damaged one says so)."""
        try:
            return object_id(sha.encode()) in self.objects
        except Exception:  # dulwich parses a loose object to answer: this one does not parse
            return True

    def read(self, sha: str) -> ShaFile:
        """Any object, checked against its id (KeyError: absent; CorruptObjectError: damaged)."""
        return read_object(self.objects, sha)

    def put_tree(self, entries: list[tuple[str, int, str]]) -> str:
        tree = Tree()
        for name, mode, sha in entries:
            tree.add(name.encode("utf-8"), mode, object_id(sha.encode()))
        self._add(tree)
        return tree.id.decode()

    def tree(self, sha: str) -> list[tuple[str, int, str]]:
        tree = self._get(sha, Tree, "tree")
        return [(e.path.decode("utf-8"), e.mode, e.sha.decode()) for e in tree.iteritems()]

    def put_commit(self, tree: str, parents: list[str], message: str, author: bytes, committer: bytes) -> str:
        now = int(time.time())
        tz = local_offset(now)
        commit = Commit()
        commit.tree = object_id(tree.encode())
        commit.parents = [object_id(p.encode()) for p in parents]
        commit.author = author
        commit.committer = committer
        commit.author_time = commit.commit_time = now
        commit.author_timezone = commit.commit_timezone = tz
        commit.encoding = b"UTF-8"
        commit.message = message.encode("utf-8")
        self._add(commit)
        return commit.id.decode()

    def put_tag(self, name: str, commit: str, message: str, tagger: bytes) -> str:
        """An annotated tag object naming ``commit`` (git's ``tag -a``: tagger, time, message)."""
        now = int(time.time())
        tag = Tag()
        tag.object = (Commit, object_id(commit.encode()))
        tag.name = name.encode("utf-8")
        tag.tagger = tagger
        tag.tag_time = now
        tag.tag_timezone = local_offset(now)
        tag.message = message.encode("utf-8") if message.endswith("\n") else message.encode("utf-8") + b"\n"
        self._add(tag)
        return tag.id.decode()

    def commit(self, sha: str) -> CommitInfo:
        c = self._get(sha, Commit, "commit")
        return CommitInfo(
            id=sha,
            tree=c.tree.decode(),
            parents=tuple(p.decode() for p in c.parents),
            author=c.author.decode("utf-8", "replace"),
            committer=c.committer.decode("utf-8", "replace"),
            time=c.commit_time,
            timezone=c.commit_timezone,
            message=c.message.decode("utf-8", "replace"),
            author_time=c.author_time,
            author_timezone=c.author_timezone,
        )

    def checked(self, sha: str) -> ShaFile:
        """Any object, checked against its id and cached (KeyError: absent)."""
        obj = self._cache.get(sha)
        if obj is None:
            obj = read_object(self.objects, sha)
            if len(self._cache) >= _CACHE_OBJECTS:
                self._cache.clear()
            self._cache[sha] = obj
        return obj

    def walker(
        self,
        include: Iterable[str],
        exclude: Iterable[str] = (),
        paths: list[bytes] | None = None,
        since: int | None = None,
        until: int | None = None,
    ) -> Walker:
        """dulwich's walk of the commits ``include`` reaches and ``exclude`` does not, newest
        first (``paths``: only commits changing them), reading every object through
        :meth:`checked`: a damaged commit or tree is named, not a zlib error."""
        return Walker(
            cast(BaseObjectStore, _CheckedObjects(self)),
            [object_id(c.encode()) for c in include],
            exclude=[object_id(c.encode()) for c in exclude],
            paths=paths,
            since=since,
            until=until,
        )

    def merge_bases(self, a: str, b: str) -> list[str]:
        """The best common ancestors of ``a`` and ``b`` (git's ``merge-base --all``), by dulwich."""
        from dulwich.graph import find_merge_base

        bases = find_merge_base(cast(BaseRepo, _CheckedRepo(self)), [object_id(a.encode()), object_id(b.encode())])
        return [x.decode() for x in bases]


class _CheckedObjects:
    """The object store as dulwich's walker and merge-base search read it (``store[id]``), each
    object through :meth:`Graph.checked`; anything else is the store's own."""

    def __init__(self, graph: Graph):
        self._graph = graph

    def __getitem__(self, sha: bytes) -> ShaFile:
        return self._graph.checked(sha.decode())

    def __contains__(self, sha: bytes) -> bool:
        return self._graph.has(sha.decode())

    def __getattr__(self, name: str) -> Any:
        return getattr(self._graph.objects, name)


class _CheckedRepo:
    """What ``dulwich.graph.find_merge_base`` reads of a repository: its objects and parents."""

    def __init__(self, graph: Graph):
        self.object_store = _CheckedObjects(graph)

    def parents_provider(self) -> ParentsProvider:
        return ParentsProvider(cast(BaseObjectStore, self.object_store))


def _advise_whole(path: str) -> None:
    """Ask the kernel to read the file at ``path`` ahead; only a hint (errors are ignored)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_WILLNEED)
    except OSError:
        pass
    finally:
        os.close(fd)


def blob_id(data: bytes) -> str:
    """The git id the blob would have, without storing it."""
    return Blob.from_string(data).id.decode()


def canonical_json(obj: dict[str, Any]) -> bytes:
    """JSON as mgit stores records in blobs: sorted keys, no spaces, no NaN (same record, same blob id)."""
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()


def _write_loose(store: DiskObjectStore, obj: ShaFile) -> None:
    """Store ``obj`` as a loose object as dulwich's ``add_object`` does (an object already
    there is only freshened: gc's grace period counts from its mtime; the directory and file
    get ``core.sharedRepository``'s permissions), except for the temporary file: a new name of
    its own (``objects/xx/.tmp-*``, as git's ``tmp_obj_*``) rather than ``<id>.lock``. So a
    write killed half way leaves a leftover that gc sweeps, not a lock file that makes every
    later write of the object fail; two writers of one object never share a file; and any error
    removes the temporary (dulwich flushes its lock file in ``close()`` outside its cleanup: a
    full disk left the ``.lock`` behind)."""
    sha = obj.id.decode()
    directory = os.path.join(store.path, sha[:2])
    path = os.path.join(directory, sha[2:])
    try:
        os.utime(path)
        return
    except FileNotFoundError:
        pass
    except PermissionError:  # another user's, in a shared repository: write it anew to freshen it
        pass
    data = obj.as_legacy_object(compression_level=store.loose_compression_level)
    try:
        os.mkdir(directory)
        adjust_shared_perm(directory, store.shared_perm)
    except FileExistsError:
        pass
    tmp = os.path.join(directory, f"{LOOSE_TMP_PREFIX}{sha[2:]}-{uuid.uuid4().hex[:8]}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, PACK_MODE)
    try:
        try:
            pwrite_all(fd, data, 0, tmp)
            if store.fsync_object_files:
                os.fsync(fd)
        finally:
            os.close(fd)
        adjust_shared_perm(tmp, store.shared_perm)  # before the rename: never visible without them
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
