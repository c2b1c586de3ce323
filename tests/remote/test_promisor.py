"""mgit.remote.promisor on its own: a store with a Promisor composed in fetches what it misses
(and keeps it), prices what it lacks before fetching, and a capped fetch stops at its limit."""

from __future__ import annotations

import os
import threading

import pytest

from mgit.context import Context
from mgit.errors import BadInputError, CorruptObjectError, RemoteError
from mgit.remote.backend import chunk_key, pack_chunk
from mgit.remote.local import DirectoryBackend
from mgit.remote.promisor import Promisor
from mgit.remote.transfer import LimitReached, Transfer
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import BASE_LEN
from mgit.worktree.cost import CheckoutCost, estimate

SIZE = 1 << 14


@pytest.fixture
def remote(tmp_path):
    """A directory remote holding a keyframe ``a``, a delta ``d`` of it and another keyframe
    ``b``; returns (backend, {name: chunk id}, {name: raw bytes})."""
    source = ChunkStore(tmp_path / "source")
    raw_a, raw_b = os.urandom(SIZE), os.urandom(SIZE)
    raw_d = bytearray(raw_a)
    raw_d[:8] = b"\xff" * 8
    a = source.put(raw_a, 4).cid
    d = source.put(bytes(raw_d), 4, base=(a, raw_a))
    assert d.base == a  # stored as a delta of a
    b = source.put(raw_b, 4).cid
    source.seal()
    backend = DirectoryBackend(tmp_path / "remote.mgit", create=True)
    ids = {"a": a, "d": d.cid, "b": b}
    for cid in ids.values():
        backend.put(chunk_key(cid), pack_chunk(source.export(cid)))
    source.close()
    return backend, ids, {"a": raw_a, "d": bytes(raw_d), "b": raw_b}


def record_size(backend: DirectoryBackend, cid: str) -> int:
    return (backend.root / chunk_key(cid)).stat().st_size


@pytest.fixture
def local(tmp_path):
    store = ChunkStore(tmp_path / "local")
    yield store
    store.close()


def promisor_of(store: ChunkStore, backend, opened: list | None = None) -> Promisor:
    def open_backend():
        if opened is not None:
            opened.append(1)
        return backend

    return Promisor("origin", open_backend, store).attach()


def test_a_read_of_a_missing_chunk_fetches_it_and_keeps_it(remote, local):
    backend, ids, raws = remote
    with pytest.raises(CorruptObjectError):  # no promisor: a missing chunk is damage
        local.get(ids["b"])
    opened: list = []
    promisor = promisor_of(local, backend, opened)
    assert opened == []  # the remote is opened on first need only
    assert local.get(ids["b"]) == raws["b"]
    assert local.has(ids["b"]) and promisor.fetched.chunks == 1
    assert promisor.fetched.bytes == record_size(backend, ids["b"])
    assert local.get(ids["b"]) == raws["b"] and promisor.fetched.chunks == 1  # kept: not fetched again
    assert local.get(ids["d"]) == raws["d"]  # a delta brings its base along
    assert local.has(ids["a"]) and promisor.fetched.chunks == 3 and opened == [1]


def test_a_dropped_connection_names_the_chunk_and_the_remote(remote, local):
    backend, ids, _ = remote

    class Dropping(DirectoryBackend):
        def get(self, key: str) -> bytes:
            raise ConnectionResetError("connection reset by peer")

    promisor_of(local, Dropping(backend.root))
    with pytest.raises(RemoteError, match=rf"cannot fetch chunk {ids['b'][:12]} from origin: connection reset"):
        local.get(ids["b"])


def test_misses_on_many_threads_open_the_remote_once(remote, local):
    backend, ids, raws = remote
    opened: list = []
    promisor_of(local, backend, opened)
    threads = [threading.Thread(target=local.get, args=(cid,)) for cid in ids.values() for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert opened == [1] and all(local.get(c) == raws[n] for n, c in ids.items())


def test_sizes_are_record_sizes_and_zero_for_chunks_here(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    local.get(ids["b"])
    assert promisor.sizes(ids.values()) == {
        ids["a"]: record_size(backend, ids["a"]),
        ids["d"]: record_size(backend, ids["d"]),
        ids["b"]: 0,
    }


def test_a_capped_fetch_stops_at_its_limit(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    sizes = {c: record_size(backend, c) for c in ids.values()}
    report = Transfer()
    with pytest.raises(LimitReached) as info:  # the delta's base is charged too, found only in its record
        promisor.fetch_within([ids["d"]], sizes[ids["d"]], report, sizes={ids["d"]: sizes[ids["d"]]})
    assert info.value.limit == sizes[ids["d"]] and info.value.needed > info.value.limit
    assert report.bytes <= sizes[ids["d"]]  # nothing fetched past the limit
    spent = promisor.fetch_within([ids["a"], ids["b"]], sizes[ids["a"]] + sizes[ids["b"]], report, sizes=sizes)
    assert spent == sizes[ids["a"]] + sizes[ids["b"]] and local.has(ids["a"]) and local.has(ids["b"])
    assert promisor.fetched.chunks == 0  # only the report given counts a capped fetch


def test_verifying_a_delta_is_charged_unless_told_otherwise(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    local.get(ids["a"])
    size = record_size(backend, ids["d"])
    with pytest.raises(LimitReached):  # decoding the base to verify the delta is a store read
        promisor.fetch_within([ids["d"]], size, Transfer())
    assert not local.has(ids["d"])
    assert promisor.fetch_within([ids["d"]], size, Transfer(), charge_verification=False) == size


def test_a_quote_prices_the_fetch_and_the_reads_after_it(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    local.get(ids["a"])
    a_cost, d_size, b_size = local.read_cost(ids["a"]), record_size(backend, ids["d"]), record_size(backend, ids["b"])
    quote = promisor.quote([ids["a"], ids["d"], ids["b"]], lambda wanted: {ids["d"]: ids["a"]})
    assert quote.fetch == {ids["d"]: d_size, ids["b"]: b_size}
    assert quote.read == {ids["d"]: d_size + BASE_LEN + a_cost, ids["b"]: b_size}  # a read again to decode d
    assert quote.verify == a_cost  # and once to verify d when it arrives
    cost = estimate([ids["a"], ids["d"], ids["b"]], local.read_cost, quote)
    assert cost == CheckoutCost(a_cost + (d_size + BASE_LEN + a_cost) + b_size + a_cost, d_size + b_size, a_cost)
    unknown = promisor.quote([ids["d"]])  # no delta base known: priced at its record only
    assert unknown.read == {ids["d"]: d_size} and unknown.verify == 0


def test_pricing_is_the_read_here_or_the_record_there(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    local.get(ids["a"])
    price = promisor.pricing(promisor.sizes(ids.values()))
    assert price(ids["a"], set()) == local.read_cost(ids["a"])
    assert price(ids["d"], set()) == record_size(backend, ids["d"]) + BASE_LEN


def test_a_checkout_fetch_over_its_budget_drops_what_it_fetched(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    quote = promisor.quote([ids["d"]])
    cost = estimate([ids["d"]], local.read_cost, quote)
    aborted: list = []

    def abort() -> None:
        aborted.append(1)
        local.abort()

    with pytest.raises(BadInputError, match="the chunks fetched from origin are deltas") as info:
        promisor.fetch_for_checkout([ids["d"]], quote, cost, cost.total, abort)
    assert aborted == [1] and not local.has(ids["d"]) and "\n" not in str(info.value)
    quote, before = promisor.quote([ids["b"]]), promisor.fetched.bytes
    cost = estimate([ids["b"]], local.read_cost, quote)
    exact = promisor.fetch_for_checkout([ids["b"]], quote, cost, cost.total, abort)
    assert exact == CheckoutCost(local.read_cost(ids["b"]), record_size(backend, ids["b"]))
    assert promisor.fetched.bytes - before == exact.fetch and aborted == [1]


def test_a_merge_fetch_refuses_expert_deltas_over_its_budget(remote, local):
    backend, ids, _ = remote
    promisor = promisor_of(local, backend)
    sizes = promisor.sizes(ids.values())
    base, experts = Transfer(), Transfer()
    with pytest.raises(BadInputError, match=r"`mgit fetch origin --chunks REV`"):
        promisor.fetch_for_merge([ids["b"]], [ids["d"]], sizes[ids["d"]], sizes, base, experts)
    assert base.chunks == 1 and local.has(ids["b"]) and not local.has(ids["d"])
    before = experts.bytes
    promisor.fetch_for_merge([ids["a"]], [ids["d"]], sizes[ids["d"]], sizes, base, experts)  # its base first
    assert local.has(ids["d"]) and experts.bytes - before == sizes[ids["d"]] and base.chunks == 2


class _Reader:
    """Just what Context.reading() looks at: the promisor, the lock, the store and the format
    upgrade (which must run under the lock, before anything is fetched)."""

    def __init__(self, promisor: Promisor | None, store):
        self.promisor, self.store = promisor, store
        self.lock = _Lock()
        self.held: list[bool] = []
        self.upgraded: list[bool] = []

    def _upgrade_format(self) -> None:
        self.upgraded.append(self.lock.depth > 0)

    def read(self, fail: bool = False) -> str:
        with Context.reading(self):  # type: ignore[arg-type]
            self.held.append(self.lock.depth > 0)
            if fail:
                raise ValueError("boom")
            return "read"


class _Lock:
    depth = 0

    def __enter__(self) -> None:
        self.depth += 1

    def __exit__(self, *exc: object) -> None:
        self.depth -= 1


def test_reading_holds_the_lock_and_seals_only_in_a_partial_clone(remote, local, monkeypatch):
    backend, _, _ = remote
    full = _Reader(None, local)
    assert full.read() == "read" and full.held == [False] and full.upgraded == []
    sealed: list = []
    monkeypatch.setattr(local, "seal", lambda: sealed.append(1))
    partial = _Reader(promisor_of(local, backend), local)
    assert partial.read() == "read" and partial.held == [True] and sealed == [1] and partial.upgraded == [True]
    with pytest.raises(ValueError):
        partial.read(fail=True)
    assert partial.held == [True, True] and sealed == [1, 1] and partial.lock.depth == 0  # sealed after an error
