"""Moving commits and chunks between a repository and a remote.

Push sends what the remote lacks: chunks (delta bases first), then graph objects, then the ref by
compare-and-swap; run again after an interruption it sends only what is missing. Fetch mirrors
it, checking every object and chunk before any ref moves; a partial fetch takes the graph only.
Details: docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Set
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from dulwich.objects import ShaFile

from mgit.errors import CorruptObjectError, MgitError, NonFastForwardError, RemoteError
from mgit.graph.objects import Graph
from mgit.graph.walks import is_ancestor
from mgit.model.reach import walk
from mgit.progress import Bar
from mgit.remote.backend import (
    Backend,
    MissingObjectError,
    children,
    chunk_key,
    object_key,
    pack_chunk,
    pack_object,
    unpack_chunk,
    unpack_object,
)
from mgit.store.chunkstore import ChunkStore

TRANSFER_THREADS = 8  # network and disk waits, not CPU: more than the cores
HAS_BATCH = 1000  # keys per existence question


@dataclass
class Transfer:
    """What one push or fetch moved."""

    objects: int = 0  # git objects sent / received
    chunks: int = 0
    bytes: int = 0  # bytes on the wire
    present_objects: int = 0  # reachable but already on the other side
    present_chunks: int = 0
    refs: dict[str, tuple[str | None, str]] = field(default_factory=dict)  # ref → (old, new)
    deleted: dict[str, str] = field(default_factory=dict)  # ref → its value before (push --delete)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, objects: int, chunks: int, size: int) -> None:
        with self._lock:
            self.objects += objects
            self.chunks += chunks
            self.bytes += size


def _batched(keys: list[str]) -> Iterator[list[str]]:
    for i in range(0, len(keys), HAS_BATCH):
        yield keys[i : i + HAS_BATCH]


def remote_has(backend: Backend, keys: Iterable[str]) -> set[str]:
    keys = list(keys)
    out: set[str] = set()
    for batch in _batched(keys):
        out |= backend.has(batch)
    return out


# -- push -----------------------------------------------------------------------------------


@dataclass
class PushPlan:
    ref: str
    old: str | None  # the remote's ref now
    new: str
    chunks: list[list[str]]  # to send, in waves: delta bases before the deltas on them
    objects: list[str]  # git objects to send
    chunk_bytes: int  # stored bytes of those chunks
    present_objects: int
    present_chunks: int


def plan_push(graph: Graph, store: ChunkStore, backend: Backend, commit: str, ref: str, force: bool) -> PushPlan:
    """What pushing ``commit`` (for a tag, also a tag object) to ``ref`` sends (asks the
    remote, sends nothing). A branch moves by fast-forward, a tag only to where it is."""
    backend.check_push(ref)
    refs = backend.refs()
    old = refs.get(ref)
    if old is not None and old != commit and not force and ref.startswith("refs/tags/"):
        raise NonFastForwardError(f"the remote's {ref} exists and names another object (a tag moves only with --force)")
    if old is not None and old != commit and not force and not (graph.has(old) and is_ancestor(graph, old, commit)):
        raise NonFastForwardError(
            f"the remote's {ref} has commits this branch lacks (not a fast-forward); "
            "fetch and merge first, or push --force to discard them"
        )
    known = {sha for sha in refs.values() if graph.has(sha)}  # the remote holds everything they reach
    reach = walk(graph, {commit: ref}, stop=known - {commit})
    if reach.missing:
        raise RemoteError(f"cannot push: {reach.missing[0]}")
    objects = sorted(reach.objects)
    on_remote = remote_has(backend, [object_key(o) for o in objects])
    todo_objects = [o for o in objects if object_key(o) not in on_remote]
    chunk_ids = sorted(reach.chunks)
    remote_chunks = {k.removeprefix("chunks/") for k in remote_has(backend, [chunk_key(c) for c in chunk_ids])}
    unsent = [c for c in chunk_ids if c not in remote_chunks]
    absent = [c for c in unsent if not store.has(c)]
    if absent:
        raise RemoteError(
            f"cannot push: {len(absent)} chunk(s) are not in this partial clone; "
            "run `mgit fetch --chunks REV` for the revision first"
        )
    todo = _with_delta_bases(store, unsent, remote_chunks, backend)
    return PushPlan(
        ref,
        old,
        commit,
        _by_depth(store, todo),
        todo_objects,
        sum(store.stored_size(c) for c in todo),
        len(objects) - len(todo_objects),
        len(chunk_ids) - len(unsent),
    )


def push(graph: Graph, store: ChunkStore, backend: Backend, plan: PushPlan, bar: Bar | None = None) -> Transfer:
    """Send what the plan lists, in parallel, then move the remote's ref by compare-and-swap."""
    bar = bar or Bar()
    report = Transfer(present_objects=plan.present_objects, present_chunks=plan.present_chunks)
    if plan.old == plan.new:
        report.refs[plan.ref] = (plan.old, plan.new)
        return report

    def send_chunk(cid: str) -> None:
        data = pack_chunk(store.export(cid))
        backend.put(chunk_key(cid), data)
        report.add(0, 1, len(data))
        bar.advance(store.stored_size(cid))

    def send_object(oid: str) -> None:
        data = pack_object(graph.read(oid))
        backend.put(object_key(oid), data)
        report.add(1, 0, len(data))

    with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="mgit-push") as pool:
        for wave in plan.chunks:
            list(pool.map(send_chunk, wave))
        list(pool.map(send_object, plan.objects))
    if not backend.swap_ref(plan.ref, plan.old, plan.new):
        raise NonFastForwardError(
            f"the remote's {plan.ref} moved while pushing (someone else pushed first); fetch, merge and push again"
        )
    report.refs[plan.ref] = (plan.old, plan.new)
    return report


def _with_delta_bases(store: ChunkStore, chunks: list[str], on_remote: set[str], backend: Backend) -> list[str]:
    """``chunks`` plus every delta base they need that the remote lacks (asked in batches:
    a fine-tune's bases are usually its parent's chunks, outside the pushed commit)."""
    out, seen = list(chunks), set(chunks) | on_remote
    frontier = chunks
    while frontier:
        bases = set()
        for cid in frontier:
            loc = store.location(cid)
            if loc is not None and loc.base and loc.base not in seen:
                bases.add(loc.base)
        seen |= bases
        present = {k.removeprefix("chunks/") for k in remote_has(backend, [chunk_key(c) for c in sorted(bases)])}
        frontier = sorted(bases - present)
        out += frontier
    return out


def _by_depth(store: ChunkStore, chunks: list[str]) -> list[list[str]]:
    """Chunks grouped by delta depth, shallowest first."""
    waves: dict[int, list[str]] = {}
    for cid in chunks:
        waves.setdefault(store.depth(cid), []).append(cid)
    return [waves[d] for d in sorted(waves)]


# -- fetch ----------------------------------------------------------------------------------


def fetch_graph(graph: Graph, backend: Backend, commits: Iterable[str], report: Transfer) -> None:
    """Every git object reachable from ``commits`` that this repository lacks; each checked
    against its id before it is stored."""
    pending = [c for c in commits]
    seen: set[str] = set()
    with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="mgit-fetch") as pool:
        while pending:
            wave = [o for o in dict.fromkeys(pending) if o not in seen]
            seen.update(wave)
            pending = []
            local = [o for o in wave if graph.has(o)]
            remote = [o for o in wave if not graph.has(o)]

            def get(oid: str) -> ShaFile:
                try:
                    data = backend.get(object_key(oid))
                except MissingObjectError:
                    raise RemoteError(f"the remote lacks object {oid[:12]} (an incomplete push?)") from None
                report.add(1, 0, len(data))
                return unpack_object(oid, data)

            fetched = list(pool.map(get, remote))
            for obj in fetched:
                graph.objects.add_object(obj)
            report.present_objects += len(local)
            for obj in fetched + [graph.read(o) for o in local]:
                pending.extend(children(obj))


_children = children  # its former name here


def chunks_of(graph: Graph, commits: Iterable[str], stop: Set[str] = frozenset()) -> set[str]:
    """Chunk ids the commits' manifests name, not walking into the commits of ``stop`` (whose
    chunks are known to be here already)."""
    reach = walk(graph, {c: "fetched commit" for c in commits}, stop=stop)
    if reach.missing:
        raise CorruptObjectError(reach.missing[0])
    return set(reach.chunks)


def remote_sizes(backend: Backend, keys: Iterable[str]) -> dict[str, int]:
    """``backend.sizes`` asked in batches."""
    out: dict[str, int] = {}
    for batch in _batched(list(keys)):
        out |= backend.sizes(batch)
    return out


def fetch_costs(store: ChunkStore, backend: Backend, chunk_ids: Iterable[str]) -> dict[str, int]:
    """Bytes that fetching each chunk costs: its record's size on the remote, 0 for a chunk
    this store holds (asked in batches, before fetching anything). A chunk stored on the remote
    as a delta also needs its base, which only the record names: :class:`FetchLimit` caps a
    fetch that finds such bases missing here."""
    ids = list(dict.fromkeys(chunk_ids))
    missing = [c for c in ids if not store.has(c)]
    sizes = remote_sizes(backend, [chunk_key(c) for c in missing])
    absent = [c for c in missing if chunk_key(c) not in sizes]
    if absent:
        more = f" and {len(absent) - 1} more" if len(absent) > 1 else ""
        raise RemoteError(f"the remote lacks chunk {absent[0][:12]}{more} (an incomplete push?)")
    return {c: sizes.get(chunk_key(c), 0) for c in ids}


class LimitReached(MgitError):
    """A capped fetch would go over its limit (``needed`` bytes in all)."""

    def __init__(self, needed: int, limit: int):
        super().__init__(f"fetching would take {needed} bytes, over the limit of {limit}")
        self.needed, self.limit = needed, limit


@dataclass
class FetchLimit:
    """A cap on what a fetch costs: bytes received, plus the store reads that verifying a
    received delta costs (its base is decoded). Each chunk is charged before it is asked for,
    at the size the remote announced (``sizes``; a delta base found missing is asked then), so
    the cap holds before the bytes arrive; a chunk of another size than announced is refused."""

    backend: Backend
    limit: int
    sizes: dict[str, int] = field(default_factory=dict)  # chunk id → announced record size
    spent: int = 0
    charge_verification: bool = True  # False: only bytes received count (a merge's fetch budget)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def charge(self, nbytes: int) -> None:
        with self._lock:
            if self.spent + nbytes > self.limit:
                raise LimitReached(self.spent + nbytes, self.limit)
            self.spent += nbytes

    def announced(self, cid: str) -> int:
        with self._lock:
            size = self.sizes.get(cid)
        if size is None:
            got = self.backend.sizes([chunk_key(cid)])
            if chunk_key(cid) not in got:
                raise RemoteError(f"the remote lacks chunk {cid[:12]} (an incomplete push?)")
            size = got[chunk_key(cid)]
            with self._lock:
                self.sizes[cid] = size
        return size


def fetch_chunks(  # noqa: C901 (claims shared between threads, with their failure paths)
    store: ChunkStore,
    backend: Backend,
    chunks: Iterable[str],
    report: Transfer,
    bar: Bar,
    limit: FetchLimit | None = None,
) -> None:
    """Receive every chunk of ``chunks`` this store lacks (and the delta bases they need);
    with ``limit``, raise :class:`LimitReached` rather than go over it."""
    store.refresh()  # then no more looks for packs of other processes: we hold the lock
    todo = sorted(c for c in set(chunks) if not store.has(c, refresh=False))
    claims: dict[str, threading.Event] = {}  # chunk → set once its first asker is done with it
    failed: dict[str, BaseException] = {}  # chunk → why its first asker could not fetch it
    claims_lock = threading.Lock()

    def fetch(cid: str) -> None:
        """Fetch ``cid`` once: a delta's base may also be in ``todo``, taken by another thread;
        then wait for that thread instead of asking (and counting) it a second time."""
        with claims_lock:
            done = claims.get(cid)
            if done is None:
                claims[cid] = threading.Event()
        if done is not None:
            done.wait()
            if cid in failed:  # the same error as its first asker's, whichever reaches the user
                raise failed[cid]
            return
        try:
            _fetch_once(cid)
        except BaseException as exc:
            failed[cid] = exc
            raise
        finally:
            claims[cid].set()

    def _fetch_once(cid: str) -> None:
        if store.has(cid, refresh=False):
            return
        announced = None
        if limit is not None:
            announced = limit.announced(cid)
            limit.charge(announced)
        try:
            data = backend.get(chunk_key(cid))
        except MissingObjectError:
            raise RemoteError(f"the remote lacks chunk {cid[:12]} (an incomplete push?)") from None
        if announced is not None and len(data) != announced:
            raise RemoteError(f"the remote sent {len(data)} bytes for chunk {cid[:12]} after announcing {announced}")
        record = unpack_chunk(cid, data)
        report.add(0, 1, len(data))
        bar.advance(len(data))
        if record.base and not store.has(record.base, refresh=False):
            fetch(record.base)
        if limit is not None and limit.charge_verification and record.is_delta and record.base:
            limit.charge(store.read_cost(record.base))  # receive decodes the base to verify the delta
        store.receive(record)  # decodes and checks it against its id before it is visible

    with ThreadPoolExecutor(TRANSFER_THREADS, thread_name_prefix="mgit-fetch") as pool:
        list(pool.map(fetch, todo))
