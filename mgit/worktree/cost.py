"""What a checkout costs before it runs, and holding it to a byte budget.

A checkout reads from the chunk store every chunk of the files it writes that the local
files in place cannot supply (delta bases included: ``ChunkStore.read_cost``); a partial
clone first fetches the chunks it lacks (their record sizes on the remote: ``fetch_costs``).
Under a budget the checkout is refused, before anything is written, when that estimate is
over it. In a partial clone, what the records name as delta bases is only known once they
arrive: the fetch is capped (``FetchLimit``) and the exact reads are checked again after it,
so bytes read plus bytes fetched never exceed the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from rich.filesize import decimal

from mgit.budget import Budget, parse_budget
from mgit.errors import BadInputError
from mgit.progress import Bar
from mgit.remote.backend import Backend
from mgit.remote.transfer import FetchLimit, LimitReached, Transfer, fetch_chunks, fetch_costs
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import BASE_LEN as DELTA_BASE_BYTES

NARROW = "check out fewer tensors with --include PATTERN (or --exclude PATTERN)"


@dataclass(frozen=True)
class CheckoutCost:
    """Bytes a checkout reads from the chunk store and fetches from a remote."""

    read: int = 0
    fetch: int = 0
    verify: int = 0  # of ``read``: store reads that verifying fetched deltas makes (their bases decoded)

    @property
    def total(self) -> int:
        return self.read + self.fetch


def checkout_budget(budget: str | int | Budget | None) -> int | None:
    """The budget in bytes. A share (``10%``) is refused: a checkout cannot write a file
    with a tenth of its bytes, so only a size says what the user will allow."""
    if budget is None:
        return None
    parsed = parse_budget(budget)
    if parsed.nbytes is None:
        raise BadInputError(
            f"a checkout budget is a size like 500MB or 2GiB, not a share ({parsed}): "
            "a checkout reads every byte of what it writes"
        )
    return parsed.nbytes


def _size(n: int) -> str:
    return f"{decimal(n)} ({n} bytes)" if n >= 1000 else f"{n} byte" + ("" if n == 1 else "s")


def over_budget(cost: CheckoutCost, budget: int, remote: str | None, when: str = "") -> str:
    """The one-line refusal: the estimate (read and fetch) against the budget."""
    fetched = f"{decimal(cost.fetch)} fetched from {remote}" if remote else "nothing to fetch (a full clone)"
    return (
        f"checkout{when} needs {_size(cost.total)}: {decimal(cost.read)} read from the chunk store + {fetched}; "
        f"the budget is {_size(budget)}; {NARROW}"
    )


def estimate(
    store: ChunkStore,
    reads: Sequence[str],
    backend: Backend | None,
    delta_bases: Callable[[set[str]], dict[str, str]] | None = None,
) -> tuple[CheckoutCost, dict[str, int]]:
    """(cost, fetch size of each chunk missing here) of reading ``reads`` (chunk ids, once per
    read). A chunk still to fetch is read at its record size. ``delta_bases`` names, for chunks
    to fetch, the chunk each was likely stored as a delta of (the commits' statistics pair every
    changed chunk with its parent's): one held here is read twice more, to verify the fetched
    delta and to decode it. Other delta bases are counted when they are known (:func:`fetch_within`)."""
    missing: dict[str, int] = {}
    if backend is not None:
        absent = sorted({c for c in reads if not store.has(c)})
        missing = {c: n for c, n in fetch_costs(store, backend, absent).items() if n}
    bases = delta_bases(set(missing)) if delta_bases is not None and missing else {}

    def base_read(cid: str) -> int:
        base = bases.get(cid)
        return store.read_cost(base) if base is not None and store.has(base, refresh=False) else 0

    verify = sum(base_read(c) for c in missing)
    read = verify + sum(
        missing[c] + (DELTA_BASE_BYTES + base_read(c) if base_read(c) else 0) if c in missing else store.read_cost(c)
        for c in reads
    )
    return CheckoutCost(read, sum(missing.values()), verify), missing


def fetch_within(
    store: ChunkStore,
    backend: Backend,
    reads: Sequence[str],
    missing: dict[str, int],
    cost: CheckoutCost,
    budget: int,
    report: Transfer,
    remote: str,
    abort: Callable[[], None],
) -> CheckoutCost:
    """Fetch the missing chunks, then price the reads to come exactly (every chunk is here
    now); over the budget at either step, ``abort`` (drop what was fetched) and refuse.
    Returns the cost as it will be measured: bytes fetched, and store reads (those that
    verifying fetched deltas made, plus those to come)."""
    limit = FetchLimit(backend, budget - (cost.read - cost.verify), dict(missing))
    wire_before = report.bytes
    try:
        fetch_chunks(store, backend, list(missing), report, Bar(), limit)
    except LimitReached as exc:
        abort()
        raise BadInputError(
            f"checkout needs more than its budget of {_size(budget)}: the chunks fetched from {remote} are deltas, "
            f"whose bases must be fetched or read to verify them (at least {decimal(exc.needed + cost.read)} in "
            f"all); {NARROW}, or fetch the revision they derive from first"
        ) from None
    except BaseException:
        abort()
        raise
    wire = report.bytes - wire_before
    exact = CheckoutCost(limit.spent - wire + sum(store.read_cost(c) for c in reads), wire)
    if exact.total > budget:
        abort()
        raise BadInputError(over_budget(exact, budget, remote, " (counting the delta bases fetched)"))
    return exact
