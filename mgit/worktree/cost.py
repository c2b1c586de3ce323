"""What a checkout costs before it runs, and holding it to a byte budget: the arithmetic and
the refusals, over sizes alone (nothing here reads a store or asks a remote).

A checkout reads from the chunk store every chunk of the files it writes that the local
files in place cannot supply (delta bases included: ``ChunkStore.read_cost``); a partial
clone first fetches the chunks it lacks, priced by its promisor (mgit.remote.promisor) as a
:class:`FetchQuote`. Under a budget the checkout is refused, before anything is written, when
:func:`estimate` is over it. In a partial clone, what the records name as delta bases is only
known once they arrive: the promisor caps the fetch and the exact reads are checked again
after it, so bytes read plus bytes fetched never exceed the budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from rich.filesize import decimal

from mgit.budget import Budget, parse_budget
from mgit.errors import BadInputError

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


@dataclass(frozen=True)
class FetchQuote:
    """What the chunks a checkout lacks here cost (a partial clone's): each one's fetch size
    (its record on the remote), each one's store read once fetched, and the store reads that
    verifying the fetched deltas makes (their bases held here are decoded)."""

    fetch: dict[str, int] = field(default_factory=dict)  # chunk id → record size on the remote
    read: dict[str, int] = field(default_factory=dict)  # chunk id → stored bytes a read touches once here
    verify: int = 0


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


def deltas_over_budget(needed: int, cost: CheckoutCost, budget: int, remote: str) -> str:
    """The one-line refusal of a capped fetch that met delta bases not here: ``needed`` bytes
    fetched and charged at least, beside the store reads ``cost`` estimated."""
    return (
        f"checkout needs more than its budget of {_size(budget)}: the chunks fetched from {remote} are deltas, "
        f"whose bases must be fetched or read to verify them (at least {decimal(needed + cost.read)} in "
        f"all); {NARROW}, or fetch the revision they derive from first"
    )


def estimate(reads: Sequence[str], read_cost: Callable[[str], int], quote: FetchQuote | None = None) -> CheckoutCost:
    """The cost of reading ``reads`` (chunk ids, once per read): a chunk held here at its
    ``read_cost``, one still to fetch at its quoted fetch and read, plus the quote's reads
    that verify the fetched deltas. Delta bases the quote could not foresee are counted when
    they are known (the promisor's capped fetch)."""
    quote = quote or FetchQuote()
    read = quote.verify + sum(quote.read[c] if c in quote.fetch else read_cost(c) for c in reads)
    return CheckoutCost(read, sum(quote.fetch.values()), quote.verify)


def after_fetch(spent: int, wire: int, reads: int) -> CheckoutCost:
    """The cost as it will be measured once a capped fetch is done: ``wire`` bytes fetched,
    and store reads: those verifying the fetched deltas made (what the fetch was charged,
    ``spent``, beyond the bytes received) plus the ``reads`` to come."""
    return CheckoutCost(spent - wire + reads, wire)
