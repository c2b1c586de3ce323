"""A benchmark's targets: what was measured against the figure it must reach, in one table.

Why: five scripts each wrote a ``row()`` closure and a four-column table of their own, with
three spellings of "not measured"; a claim is one record here and every targets table reads
the same (metric, value, target, met).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from harness.report import table


@dataclass(frozen=True)
class Target:
    """One claim of a run: ``shown`` is the measured value as printed; ``met`` None = not measured;
    ``context`` the cells of a table's leading columns (a merge method, a K), if it has them."""

    metric: str
    shown: str
    target: str
    met: bool | None
    context: tuple[str, ...] = ()


def target(
    metric: str,
    value: float | None,
    target: str,
    ok: Callable[[float], bool],
    fmt: str = "{:.2f}",
    missing: str = "n/a",
    context: tuple[str, ...] = (),
) -> Target:
    """The claim ``metric`` for a measured ``value`` (None: not measured, shown as ``missing``)."""
    if value is None:
        return Target(metric, missing, target, None, context)
    return Target(metric, fmt.format(value), target, ok(value), context)


def at_least(bound: float) -> Callable[[float], bool]:
    return lambda value: value >= bound


def at_most(bound: float) -> Callable[[float], bool]:
    return lambda value: value <= bound


def met_cell(met: bool | None) -> str:
    """``yes``, a bold ``no`` (what a reader must not miss), or ``n/a``."""
    return "n/a" if met is None else "yes" if met else "**no**"


def targets_table(targets: Sequence[Target], lead: Sequence[str] = (), lead_align: str = "") -> str:
    """The targets as a Markdown table; ``lead`` names the leading columns their ``context`` fills,
    aligned by ``lead_align`` (one ``l`` or ``r`` each; default left)."""
    rows = [[*t.context, t.metric, t.shown, t.target, met_cell(t.met)] for t in targets]
    align = (lead_align or "l" * len(lead)) + "lrrl"
    return table([*lead, "metric", "value", "target", "met"], align, rows)
