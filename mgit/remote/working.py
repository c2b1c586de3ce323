"""Another working repository on this machine used as a remote, as ``git clone /path/to/repo``
allows: clone, fetch and pull read its graph (``.mgit``) and chunk store directly.

Pushing into it is allowed for every branch but the one it has checked out (its files and
index would no longer match its branch): that one is refused with one line, as git refuses
by default. Objects and chunks pushed are checked against their ids and stored under that
repository's lock, taken at the first upload and held until the ref moves (or the push fails).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from contextlib import ExitStack
from pathlib import Path

from mgit.errors import CorruptObjectError, LockedError, RemoteError
from mgit.graph.formats import FORMAT_VERSION, mark_format, read_format
from mgit.graph.ids import object_id, ref_name
from mgit.graph.objects import Graph
from mgit.lock import RepoLock
from mgit.remote.backend import (
    HEAD_KEY,
    REF_PREFIXES,
    Backend,
    MissingObjectError,
    check_key,
    check_ref_update,
    checked_refs,
    chunk_wire_size,
    pack_chunk,
    pack_object,
    unpack_chunk,
    unpack_object,
)
from mgit.store.chunkstore import ChunkStore

GIT_DIR = ".mgit"
HEADS = "refs/heads/"


def is_working_repository(path: str | Path) -> bool:
    return (Path(path) / GIT_DIR / "HEAD").is_file()


class WorkingRepositoryBackend(Backend):
    def __init__(self, root: str | Path):
        self.root = Path(root).resolve()
        self.url = str(self.root)
        self.graph = Graph(self.root / GIT_DIR)
        self.format = read_format(self.graph, self.root)  # one this mgit cannot read is refused
        self.store = ChunkStore(self.root / GIT_DIR / "chunks")
        self._lock = RepoLock(self.root / GIT_DIR / "lock")
        self._held = ExitStack()
        self._guard = threading.Lock()
        self._locked = False

    # -- reading ------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        kind, _, name = check_key(key).partition("/")
        if key == HEAD_KEY:
            branch = self._checked_out()
            if branch is None:
                raise MissingObjectError(f"{self.url} has a detached HEAD")
            return f"ref: {HEADS}{branch}\n".encode()
        if kind == "objects":
            try:
                return pack_object(self.graph.read(name))  # checked against its id
            except KeyError:
                raise MissingObjectError(f"{self.url} has no {key}") from None
            except CorruptObjectError:
                raise CorruptObjectError(
                    f"object {name[:12]} is damaged in {self.url}; run `mgit fsck` there"
                ) from None
        if kind == "chunks":
            if not self.store.has(name):
                raise MissingObjectError(f"{self.url} has no {key}")
            return pack_chunk(self.store.export(name))
        value = self.refs().get(key)
        if value is None:
            raise MissingObjectError(f"{self.url} has no {key}")
        return f"{value}\n".encode()

    def has(self, keys: Iterable[str]) -> set[str]:
        out = set()
        for key in keys:
            kind, _, name = check_key(key).partition("/")
            if (kind == "objects" and self.graph.has(name)) or (kind == "chunks" and self.store.has(name)):
                out.add(key)
        return out

    def sizes(self, keys: Iterable[str]) -> dict[str, int]:
        """The size each key would have on the wire (what ``get`` returns); a chunk's from
        its stored size, without reading it."""
        out = {}
        for key in self.has(keys):
            kind, _, name = key.partition("/")
            out[key] = chunk_wire_size(self.store.payload_size(name)) if kind == "chunks" else len(self.get(key))
        return out

    def refs(self) -> dict[str, str]:
        refs = self.graph.repo.refs
        out: dict[str, str] = {}
        for prefix in REF_PREFIXES:
            for name, sha in refs.as_dict(ref_name(prefix.encode())).items():
                out[prefix + name.decode(errors="replace")] = sha.decode(errors="replace")
        return checked_refs(self.url, out)

    def head(self) -> str | None:
        return self._checked_out()

    def _checked_out(self) -> str | None:
        """The branch its HEAD names, read from HEAD alone: listing every symref would read refs
        a concurrent push may be deleting (dulwich then fails an assertion)."""
        raw = self.graph.repo.refs.read_ref(ref_name(b"HEAD")) or b""
        target = raw.removeprefix(b"ref: ").strip() if raw.startswith(b"ref: ") else b""
        return target.decode()[len(HEADS) :] if target.startswith(HEADS.encode()) else None

    # -- pushing ------------------------------------------------------------------------------

    def _writing(self) -> None:
        """Take that repository's lock (once) before the first write."""
        with self._guard:
            if not self._locked:
                try:
                    self._held.enter_context(self._lock)
                except LockedError as exc:
                    raise LockedError(f"{self.url}: {exc}") from None
                self._locked = True
                if self.format < FORMAT_VERSION:  # what is pushed may be of kinds its format lacks
                    mark_format(self.graph)
                    self.format = FORMAT_VERSION

    def put(self, key: str, data: bytes) -> None:
        kind, _, name = check_key(key).partition("/")
        if kind not in ("objects", "chunks"):
            raise RemoteError(f"{self.url}: only objects and chunks are uploaded, not {key}")
        self._writing()
        if kind == "objects":
            self.graph.objects.add_object(unpack_object(name, data))
        else:
            self.store.receive(unpack_chunk(name, data), "a pushed chunk")

    def check_push(self, ref: str) -> None:
        """Its checked-out branch is refused: its files and index would no longer match it."""
        if ref == f"{HEADS}{self._checked_out()}":
            raise RemoteError(
                f"{self.url} is a working repository, not a remote: pushing into its checked-out branch "
                f"{ref.removeprefix(HEADS)} is refused (its files would not match); push another branch, "
                "or pull from that repository's side"
            )

    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        self.check_push(check_key(name))
        self._writing()
        try:
            self.store.seal()  # chunks are visible before any ref names them
            check_ref_update(self, name, new, self.refs())
            ok = self._cas(name.encode(), old.encode() if old else None, new.encode() if new else None)
            return bool(ok)
        finally:
            self.close()

    def _cas(self, name: bytes, old: bytes | None, new: bytes | None) -> bool:
        """dulwich's compare-and-swap, with None meaning "absent" on both sides."""
        refs, ref = self.graph.repo.refs, ref_name(name)
        if old is None:
            return ref not in refs if new is None else refs.add_if_new(ref, object_id(new), message=b"push")
        if new is None:
            return refs.remove_if_equals(ref, object_id(old), message=b"push: delete")
        return refs.set_if_equals(ref, object_id(old), object_id(new), message=b"push")

    def close(self) -> None:
        """Publish what was received and release the lock (an unfinished push keeps its chunks
        sealed but unreferenced, as any interrupted push: gc removes them)."""
        with self._guard:
            if self._locked:
                try:
                    self.store.seal()
                finally:  # a failed seal (a full disk) must not keep that repository locked
                    self._held.close()
                    self._locked = False
