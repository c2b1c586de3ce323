"""What every remote is: a store of named objects plus refs updated by compare-and-swap.

The key space (``objects/``, ``chunks/``, ``refs/``, ``HEAD``) is the same for every backend.
Objects are immutable and content-addressed, so ``put`` is idempotent and an interrupted upload
is repeated; an object is visible only once complete; receivers check each against its id. The
keys: docs/remotes.md, "The backend interface"; docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import hashlib
import re
import stat
import zlib
from abc import ABC, abstractmethod
from collections.abc import Iterable

from dulwich.objects import Blob, Commit, ShaFile, Tag, Tree, object_class

from mgit.errors import CorruptObjectError, RemoteError
from mgit.graph.ids import object_id
from mgit.graph.refs import check_ref_name, clash_message, ref_clash
from mgit.store import codec, record
from mgit.store.record import Record

OBJECT_KEY = re.compile(r"objects/[0-9a-f]{40}")
CHUNK_KEY = re.compile(r"chunks/[0-9a-f]{64}")
SKETCHES = "refs/mgit/sketches/"
SKETCH_KEY = re.compile(r"refs/mgit/sketches/[0-9a-f]{40}")
REF_PREFIXES = ("refs/heads/", "refs/tags/", SKETCHES)  # the refs a remote holds


def is_remote_ref(name: str) -> bool:
    """Whether ``name`` is under one of the prefixes a remote holds refs in (its form unchecked)."""
    return name.startswith(REF_PREFIXES)


HEAD_KEY = "HEAD"
MAX_OBJECT_BYTES = 64 * 2**20  # chunks are 4 MiB, blobs of non-tensor files at most that: room to spare


class MissingObjectError(RemoteError):
    """The remote does not hold the object asked for."""


class BadRefError(RemoteError):
    """A ref update a remote refuses: a malformed value, a commit it does not hold with its
    whole graph, or a name that clashes with an existing ref (as git's receive-pack refuses)."""


class Backend(ABC):
    """One remote. Implementations: DirectoryBackend, HttpBackend, S3Backend."""

    url: str

    @abstractmethod
    def get(self, key: str) -> bytes:
        """The object's bytes; MissingObjectError if absent."""

    @abstractmethod
    def put(self, key: str, data: bytes) -> None:
        """Store an object (idempotent; visible only once complete)."""

    @abstractmethod
    def has(self, keys: Iterable[str]) -> set[str]:
        """Which of ``keys`` the remote holds (one batched question)."""

    @abstractmethod
    def sizes(self, keys: Iterable[str]) -> dict[str, int]:
        """Stored size in bytes of each of ``keys`` the remote holds (one batched question;
        absent keys are left out): what fetching them costs, asked before fetching."""

    @abstractmethod
    def refs(self) -> dict[str, str]:
        """Every ref (``refs/heads/...``, ``refs/tags/...``) → commit id."""

    @abstractmethod
    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        """Set ref ``name`` to ``new`` (None: delete) if it is ``old`` now (None: absent);
        False when it was not: someone else moved it first."""

    def check_push(self, ref: str) -> None:  # noqa: B027 - optional hook
        """Refuse (RemoteError) a push to ``ref`` before anything is sent; the default allows it
        (a working repository refuses its checked-out branch)."""

    def head(self) -> str | None:
        """The branch a clone should check out (from HEAD), if any."""
        try:
            text = self.get(HEAD_KEY).decode().strip()
        except (MissingObjectError, UnicodeDecodeError):
            return None
        return text.removeprefix("ref: refs/heads/") if text.startswith("ref: refs/heads/") else None

    def close(self) -> None:  # noqa: B027 - optional hook
        pass


# -- keys -------------------------------------------------------------------------------------


def object_key(oid: str) -> str:
    return f"objects/{oid}"


def chunk_key(cid: str) -> str:
    return f"chunks/{cid}"


def check_key(key: str) -> str:
    """A key a remote may hold; anything else (``..``, absolute paths, odd names) is refused."""
    if key == HEAD_KEY or OBJECT_KEY.fullmatch(key) or CHUNK_KEY.fullmatch(key):
        return key
    if key.startswith(("refs/heads/", "refs/tags/")):
        check_ref_name(key.split("/", 2)[2], "ref")
        return key
    if SKETCH_KEY.fullmatch(key):
        return key
    raise RemoteError(f"not a valid remote object name: {key[:80]!r}")


def checked_refs(url: str, refs: object) -> dict[str, str]:
    """A remote's refs, each a valid ref name pointing at a 40-hex id (a hostile or broken
    remote gets one clear error instead of odd failures later)."""
    if not isinstance(refs, dict):
        raise RemoteError(f"{url} sent a malformed ref list")
    out = {}
    for name, value in refs.items():
        if not isinstance(name, str) or not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{40}", value):
            raise RemoteError(f"{url} has a malformed ref {str(name)[:80]!r}; the remote is damaged or not mgit's")
        if not is_remote_ref(name):
            raise RemoteError(f"{url} sent an unexpected ref name {name[:80]!r}")
        check_key(name)
        out[name] = value
    return out


def check_ref_form(name: str, new: str | None, existing: Iterable[str]) -> None:
    """Refuse (BadRefError) a ref value that is not a 40-hex id, or a name under an existing
    ref (or with refs under it), or a name that is no branch or tag (an object's key, HEAD: a
    swap there would overwrite what it holds): what every backend can check without reading objects."""
    if not name.startswith(("refs/heads/", "refs/tags/")) and not SKETCH_KEY.fullmatch(name):
        raise BadRefError(f"refusing {name}: not a branch, tag or sketch (refs/heads/…, refs/tags/…)")
    other = ref_clash(name, existing)
    if other is not None:
        raise BadRefError(clash_message(name, other))
    if new is not None and (not isinstance(new, str) or not re.fullmatch(r"[0-9a-f]{40}", new)):
        raise BadRefError(f"refusing {name} = {str(new)[:80]!r}: not a 40-hex commit id")


def check_ref_update(backend: Backend, name: str, new: str | None, existing: dict[str, str]) -> None:
    """Refuse (BadRefError) setting ref ``name`` to ``new`` unless ``new`` names a commit (a tag
    object too, for a tag) that ``backend`` holds with every object it reaches, and ``name``
    neither lies under an existing ref nor has refs under it. ``existing`` (ref → id, checked
    when set; ``name``'s own value may be among them) bounds the walk: what an existing ref
    reaches is known to be complete. Only commits, tags and trees are read; the blobs they
    name (a model's manifests) are checked for presence in one batch."""
    check_ref_form(name, new, existing)
    if new is None:
        return
    allowed = (b"commit", b"tag") if name.startswith("refs/tags/") else (b"commit",)
    seen = _reached_by(backend, existing.values())
    pending, blobs = [new], set()
    while pending:
        oid = pending.pop()
        if oid in seen and oid != new:  # the new value itself is read for its type
            continue
        seen.add(oid)
        obj = _read_for(backend, name, new, oid)
        if oid == new and obj.type_name not in allowed:
            raise BadRefError(f"refusing {name} = {new[:12]}: it names a {obj.type_name.decode()}, not a commit")
        trees, leaves = _split(obj)
        pending.extend(t for t in trees if t != new)
        blobs.update(leaves)
    wanted = {object_key(b): b for b in blobs - seen}
    lacking = sorted(wanted[k] for k in set(wanted) - backend.has(wanted))
    if lacking:
        raise BadRefError(
            f"refusing {name} = {new[:12]}: the remote lacks object {lacking[0][:12]}, which it reaches; push it first"
        )


def _read_for(backend: Backend, name: str, new: str, oid: str) -> ShaFile:
    """A git object a ref update reaches, or the BadRefError saying it is missing or damaged."""
    try:
        return unpack_object(oid, backend.get(object_key(oid)))
    except MissingObjectError:
        what = "that commit" if oid == new else f"object {oid[:12]}, which it reaches"
        raise BadRefError(f"refusing {name} = {new[:12]}: the remote lacks {what}; push it first") from None
    except CorruptObjectError:
        raise BadRefError(f"refusing {name} = {new[:12]}: the remote's object {oid[:12]} is damaged") from None


def _split(obj: ShaFile) -> tuple[list[str], list[str]]:
    """What an object names: (ids to read — commits, tags, trees —, blob ids to check for)."""
    if isinstance(obj, Tree):
        entries = [e for e in obj.iteritems() if e.mode != 0o160000]
        trees = [e.sha.decode() for e in entries if stat.S_ISDIR(e.mode)]
        return trees, [e.sha.decode() for e in entries if not stat.S_ISDIR(e.mode)]
    return children(obj), []


def _reached_by(backend: Backend, tips: Iterable[str]) -> set[str]:
    """The existing tips, and the trees and blobs of the commits they name: known complete,
    so the walk of a new commit stops there (its unchanged files cost no read). Trees only
    are read; what cannot be read is left out (the walk then reads it itself)."""
    known = {t for t in tips if isinstance(t, str) and re.fullmatch(r"[0-9a-f]{40}", t)}
    pending = []
    for tip in sorted(known):
        try:
            obj = unpack_object(tip, backend.get(object_key(tip)))
        except (MissingObjectError, CorruptObjectError):
            continue
        if isinstance(obj, Commit):
            pending.append(obj.tree.decode())
    while pending:
        oid = pending.pop()
        if oid in known:
            continue
        try:
            obj = unpack_object(oid, backend.get(object_key(oid)))
        except (MissingObjectError, CorruptObjectError):
            continue
        if not isinstance(obj, Tree):
            continue
        known.add(oid)
        trees, leaves = _split(obj)
        pending.extend(trees)
        known.update(leaves)
    return known


def children(obj: ShaFile) -> list[str]:
    """The ids a git object names (commit: tree and parents; tree: entries but submodules;
    tag: its target)."""
    if isinstance(obj, Commit):
        return [obj.tree.decode(), *(p.decode() for p in obj.parents)]
    if isinstance(obj, Tree):
        return [e.sha.decode() for e in obj.iteritems() if e.mode != 0o160000]
    if isinstance(obj, Tag):
        return [obj.object[1].decode()]
    assert isinstance(obj, Blob)
    return []


def checked_sizes(url: str, keys: list[str], sizes: object) -> dict[str, int]:
    """A remote's answer to ``sizes``, each a key that was asked for with a non-negative
    integer size (a hostile or broken remote gets one clear error, not a wrong budget)."""
    if not isinstance(sizes, dict):
        raise RemoteError(f"{url} sent a malformed size list (not a JSON object); is it an mgit server?")
    asked = set(keys)
    out = {}
    for key, size in sizes.items():
        if not isinstance(size, int) or isinstance(size, bool) or size < 0:
            raise RemoteError(f"{url} sent a malformed size {str(size)[:40]!r} for {str(key)[:80]!r}")
        if key not in asked:
            raise RemoteError(f"{url} sent the size of {str(key)[:80]!r}, which was not asked for")
        out[key] = size
    return out


# -- git objects on the wire ----------------------------------------------------------------


def pack_object(obj: ShaFile) -> bytes:
    """A git object as git hashes it (compressed: deflate of the loose-object bytes)."""
    raw = obj.type_name + b" " + str(obj.raw_length()).encode() + b"\0" + obj.as_raw_string()
    return zlib.compress(raw, 1)


def unpack_object(oid: str, data: bytes) -> ShaFile:
    """The object, checked against its id; CorruptObjectError names it otherwise."""
    try:
        raw = zlib.decompressobj().decompress(data, MAX_OBJECT_BYTES + 64)
        header, _, content = raw.partition(b"\0")
        type_name, size = header.split(b" ")
        cls = object_class(type_name)
        if cls is None or int(size) != len(content):
            raise ValueError
    except (ValueError, zlib.error):
        raise CorruptObjectError(f"object {oid[:12]} from the remote is not a valid git object") from None
    if hashlib.sha1(raw).hexdigest() != oid:
        raise CorruptObjectError(f"object {oid[:12]} from the remote does not match its id (damaged or tampered with)")
    return ShaFile.from_raw_string(cls.type_num, content, sha=object_id(oid.encode()))


# -- chunks on the wire ---------------------------------------------------------------------


def chunk_wire_size(payload_size: int) -> int:
    """How many bytes ``pack_chunk`` sends for a chunk whose stored payload has this length."""
    return record.wire_size(payload_size)


def pack_chunk(rec: Record) -> bytes:
    """A chunk's record as a remote holds it (record.to_wire)."""
    return record.to_wire(rec)


def unpack_chunk(cid: str, data: bytes) -> Record:
    """The record (not yet checked against its id: ``ChunkStore.receive`` decodes and checks);
    CorruptObjectError, naming the remote, for bytes that are not one."""
    try:  # refused before any decoding (a few KiB of zstd can claim a GiB)
        return record.from_wire(cid, data)
    except record.NotARecordError:
        raise CorruptObjectError(f"chunk {cid[:12]} from the remote is not a chunk record") from None
    except codec.ChunkTooLargeError as exc:
        raise CorruptObjectError(f"chunk {cid[:12]} from the remote {exc}; refusing it") from None
