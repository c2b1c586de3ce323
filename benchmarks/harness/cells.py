"""Table cells: sizes, ratios, run times and yes/NO, written the same way by every report.

Why: the scripts each had an ``mb()`` or ``fmt_mb()`` and a ``" / ".join(...)`` of run times, with
their own spelling of "not measured"; a cell reads alike in every table, and a missing number says
so with the marker its table uses. (Candidates for report.py, next to ``fmt_gb`` and ``fmt_rss``.)
"""

from __future__ import annotations

from collections.abc import Sequence

from harness.models import MB


def mb(n: float | None, missing: str = "n/a") -> str:
    """Bytes as MB with thousands separators and one decimal ("1,234.5"); ``missing`` for None."""
    return missing if n is None else f"{n / MB:,.1f}"


def ratio(n: float | None, d: float | None, digits: int = 3, missing: str = "n/a") -> str:
    """``n / d`` to ``digits`` decimals; ``missing`` when either is None or ``d`` is 0."""
    return missing if n is None or not d else f"{n / d:.{digits}f}"


def runs_cell(times: Sequence[float], digits: int = 2) -> str:
    """Every run's seconds: "1.20 / 1.31 / 1.25"."""
    return " / ".join(f"{t:.{digits}f}" for t in times)


def yes_no(ok: bool) -> str:
    """``yes``, or a bold ``NO`` (a failed check a reader must not miss)."""
    return "yes" if ok else "**NO**"
