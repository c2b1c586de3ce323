"""A partial clone's chunk source: the remote it came from, asked for the chunks this store lacks.

Composed into the ChunkStore as its miss hook, so reading a chunk not here fetches it (and its
delta bases), verified; budgeted commands ask the sizes first and fetch within a limit. Details:
docs/design.md, "Notes from the code".
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

from mgit.errors import BudgetExceededError, RemoteError
from mgit.progress import Bar, byte_progress
from mgit.remote.backend import Backend
from mgit.remote.transfer import FetchLimit, LimitReached, Transfer, fetch_chunks, fetch_costs
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import BASE_LEN as DELTA_BASE_BYTES
from mgit.worktree.cost import CheckoutCost, FetchQuote, after_fetch, deltas_over_budget, over_budget

F = TypeVar("F", bound=Callable[..., Any])


class Promisor:
    """The remote a partial clone fetches missing chunks from (opened on first use), and the
    count of what reads fetched on demand through it (``fetched``)."""

    def __init__(self, remote: str, open_backend: Callable[[], Backend], store: ChunkStore):
        self.remote = remote  # the remote's name in .mgit/config
        self.store = store
        self.fetched = Transfer()  # what reads (and checkouts within a budget) fetched through this object
        self._open = open_backend
        self._backend: Backend | None = None
        self._lock = threading.Lock()

    def attach(self) -> Promisor:
        """Compose into the store: from now on a chunk missing there is fetched from here."""
        self.store.fallback = self.fetch_missing
        return self

    @property
    def backend(self) -> Backend:
        """The remote, opened once (reads on several threads may miss at the same time)."""
        with self._lock:
            if self._backend is None:
                self._backend = self._open()
            return self._backend

    def fetch_missing(self, cid: str) -> None:
        """The store's miss hook: fetch ``cid`` (and the delta bases it needs) into the store."""
        backend = self.backend
        try:
            fetch_chunks(self.store, backend, [cid], self.fetched, Bar())
        except OSError as exc:  # a dropped connection mid-read; MgitErrors already say what happened
            raise RemoteError(f"cannot fetch chunk {cid[:12]} from {self.remote}: {exc}") from None

    # -- what fetching costs ------------------------------------------------------------------

    def sizes(self, chunk_ids: Iterable[str]) -> dict[str, int]:
        """What fetching each chunk costs: its record's size on the remote, 0 if held here."""
        return fetch_costs(self.store, self.backend, chunk_ids)

    def quote(
        self, reads: Sequence[str], delta_bases: Callable[[set[str]], dict[str, str]] | None = None
    ) -> FetchQuote:
        """What reading ``reads`` (chunk ids) needs fetched, and what reading those costs once
        here: the record as fetched, and for a delta of a chunk held here the base id its record
        carries and the base (read again to verify the delta and to decode it). ``delta_bases``
        names, for chunks to fetch, the chunk each was likely stored as a delta of (the commits'
        statistics pair every changed chunk with its parent's); other delta bases only show
        when the records arrive (:meth:`fetch_within`)."""
        absent = sorted({c for c in reads if not self.store.has(c)})
        missing = {c: n for c, n in self.sizes(absent).items() if n}
        bases = delta_bases(set(missing)) if delta_bases is not None and missing else {}

        def base_read(cid: str) -> int:
            base = bases.get(cid)
            return self.store.read_cost(base) if base is not None and self.store.has(base, refresh=False) else 0

        verify = {c: base_read(c) for c in missing}
        read = {c: n + (DELTA_BASE_BYTES + verify[c] if verify[c] else 0) for c, n in missing.items()}
        return FetchQuote(missing, read, sum(verify.values()))

    def pricing(self, sizes: Mapping[str, int]) -> Callable[[str, set[str]], int]:
        """What reading a chunk costs: the stored bytes here (up to a base in the set held),
        or for a chunk still on the remote its record size there (``sizes``) plus the base id a
        delta record carries here, so it bounds both the fetch and the read after it. A merge's
        expert chunk is a delta of the base's chunk or none (the commit statistics that rank it
        pair it with that chunk), so no further delta base is counted for it; a fetch finding
        otherwise stops at the budget (:meth:`fetch_for_merge`)."""

        def cost(cid: str, held: set[str]) -> int:
            if self.store.has(cid, refresh=False):
                return self.store.read_cost(cid, held)
            return sizes[cid] + DELTA_BASE_BYTES

        return cost

    # -- fetching -------------------------------------------------------------------------

    def fetch_within(
        self,
        chunks: Iterable[str],
        limit: int,
        report: Transfer,
        bar: Bar | None = None,
        *,
        sizes: Mapping[str, int] | None = None,
        charge_verification: bool = True,
    ) -> int:
        """Fetch ``chunks`` (and the delta bases they need), charging each at its announced
        size (``sizes``, else asked) before asking for it and, unless ``charge_verification`` is
        off, the store reads verifying a delta takes; raises :class:`LimitReached` rather than
        go over ``limit``. Returns what was charged."""
        cap = FetchLimit(self.backend, limit, dict(sizes or {}), charge_verification=charge_verification)
        fetch_chunks(self.store, self.backend, chunks, report, bar or Bar(), cap)
        return cap.spent

    def fetch_for_checkout(
        self, reads: Sequence[str], quote: FetchQuote, cost: CheckoutCost, budget: int, abort: Callable[[], None]
    ) -> CheckoutCost:
        """Fetch the quoted chunks of a checkout ``cost`` estimated, then price the reads to
        come exactly (every chunk is here now); over the budget at either step, ``abort`` (drop
        what was fetched) and refuse. Returns the cost as it will be measured: bytes fetched,
        and store reads (those that verifying fetched deltas made, plus those to come)."""
        wire_before = self.fetched.bytes
        try:
            limit = budget - (cost.read - cost.verify)  # the reads verifying deltas are charged to the fetch
            spent = self.fetch_within(list(quote.fetch), limit, self.fetched, sizes=quote.fetch)
        except LimitReached as exc:
            abort()
            raise BudgetExceededError(deltas_over_budget(exc.needed, cost, budget, self.remote)) from None
        except BaseException:
            abort()
            raise
        exact = after_fetch(spent, self.fetched.bytes - wire_before, sum(self.store.read_cost(c) for c in reads))
        if exact.total > budget:
            abort()
            raise BudgetExceededError(over_budget(exact, budget, self.remote, " (counting the delta bases fetched)"))
        return exact

    def fetch_for_merge(
        self,
        base_ids: Sequence[str],
        expert_ids: Sequence[str],
        limit: int | None,
        sizes: Mapping[str, int],
        base_report: Transfer,
        expert_report: Transfer,
    ) -> None:
        """What a merge reads, fetched before it runs: the base's chunks, then the chosen expert
        chunks, the latter capped at ``limit`` (its budget; ``sizes``: their announced sizes),
        each counted in its report; sealed."""
        with byte_progress("fetch", 0) as bar:
            fetch_chunks(self.store, self.backend, base_ids, base_report, bar)
            try:
                if limit is None:
                    fetch_chunks(self.store, self.backend, expert_ids, expert_report, bar)
                else:
                    self.fetch_within(expert_ids, limit, expert_report, bar, sizes=sizes, charge_verification=False)
            except LimitReached:
                raise BudgetExceededError(
                    f"the expert chunks chosen for this budget are deltas of chunks not here; fetch the experts' "
                    f"history first (`mgit fetch {self.remote} --chunks REV`) or raise --budget"
                ) from None
        self.store.seal()
