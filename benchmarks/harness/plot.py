"""Line charts of a benchmark's numbers, drawn with matplotlib: lines with markers, horizontal
reference lines, a legend; one panel or several side by side.

Why: a benchmark's figure belongs beside its tables in benchmarks/results/, diffable and identical
for identical numbers. matplotlib draws it; what would change between two runs of the same numbers
is pinned here: the SVG's ids (``svg.hashsalt``), its date (``metadata``), the font, and text kept
as text (``svg.fonttype`` none). matplotlib is imported inside the functions that draw: the harness
imports nothing heavy at import time (timed children inherit this process's memory at fork), and
plotting runs in the harness's process, never in a peer tool's environment.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
SOLID, DASHED, DOTTED, NO_LINE = "-", "--", ":", "none"  # matplotlib line styles
STYLE = {
    "svg.hashsalt": "mgit-benchmarks",  # fixed ids: the same numbers give the same file
    "svg.fonttype": "none",  # text stays text (searchable, smaller)
    "font.family": "DejaVu Sans",  # ships with matplotlib: the same glyph metrics everywhere
    "font.size": 10,
}
METADATA = {".svg": {"Date": None}, ".png": {"Software": None}}  # nothing that changes between runs


@dataclass(frozen=True)
class Series:
    """A line through ``points`` (x, y), drawn in x order; an empty ``label`` keeps it out of the legend."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str
    dash: str = SOLID  # a matplotlib line style; NO_LINE: markers only
    marker: str = "o"  # a matplotlib marker ("o", "s", "x", "*"); "" for none
    marker_size: float = 6.0


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line across the panel (e.g. a tool whose cost does not depend on x)."""

    label: str
    y: float
    color: str
    dash: str = DOTTED


@dataclass(frozen=True)
class Panel:
    """One chart: its lines, axes and legend. x spans the ticks given (log scale with ``log_x``);
    y starts at 0 unless ``log_y``. ``legend`` replaces the lines' own labels with these entries
    (e.g. one per colour and one per line style); ``legend_outside`` puts it right of the panel."""

    series: Sequence[Series]
    x_ticks: Sequence[tuple[float, str]]
    hlines: Sequence[HLine] = ()
    title: str = ""
    x_label: str = ""
    y_label: str = ""
    log_x: bool = False
    log_y: bool = False
    legend: Sequence[Series | HLine] | None = None
    legend_outside: bool = False
    legend_cols: int = 1
    title_size: float = 10


def line_chart(
    series: Sequence[Series],
    hlines: Sequence[HLine] = (),
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]],
    log_x: bool = False,
) -> Figure:
    """One panel, its legend at the right: the figure bench_scale and bench_quality draw."""
    panel = Panel(series, x_ticks, hlines, title, x_label, y_label, log_x, legend_outside=True, title_size=12)
    return figure([panel], size=(10.0, 4.6))


def figure(panels: Sequence[Panel], *, title: str = "", size: tuple[float, float] = (8.0, 4.4)) -> Figure:
    """The panels side by side in one figure, under ``title``."""
    import matplotlib
    from matplotlib.figure import Figure

    with matplotlib.rc_context(STYLE):
        fig = Figure(figsize=size)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, panel in zip(axes, panels, strict=True):
            draw(ax, panel)
        if title:
            fig.suptitle(title, fontsize=11)
        fig.tight_layout()
    return fig


def draw(ax: Any, p: Panel) -> None:
    """One panel's lines, axes and legend on the matplotlib axes ``ax``."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    for h in p.hlines:
        ax.axhline(h.y, ls=h.dash, color=h.color, lw=1.5, label=h.label or "_nolegend_")
    for s in p.series:
        xs, ys = zip(*sorted(s.points), strict=True) if s.points else ((), ())
        style = {"ls": s.dash, "marker": s.marker or "", "markersize": s.marker_size, "color": s.color}
        ax.plot(xs, ys, lw=2, label=s.label or "_nolegend_", **style)
    if p.log_x:
        ax.set_xscale("log")
    if p.log_y:
        ax.set_yscale("log")
    else:
        ax.set_ylim(bottom=0)
    ax.xaxis.set_major_locator(FixedLocator([x for x, _ in p.x_ticks]))
    ax.xaxis.set_major_formatter(FixedFormatter([label for _, label in p.x_ticks]))
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_xlabel(p.x_label)
    ax.set_ylabel(p.y_label)
    ax.set_title(p.title, fontsize=p.title_size)
    ax.grid(True, which="both", alpha=0.3)
    handles = None if p.legend is None else [legend_entry(e) for e in p.legend]
    where = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0} if p.legend_outside else {}
    ax.legend(handles=handles, fontsize=8, ncols=p.legend_cols, **where)


def legend_entry(e: Series | HLine) -> Any:
    """A legend's line for ``e``, drawn nowhere."""
    from matplotlib.lines import Line2D

    if isinstance(e, HLine):
        return Line2D([], [], color=e.color, ls=e.dash, label=e.label)
    return Line2D([], [], color=e.color, ls=e.dash, marker=e.marker or "", markersize=e.marker_size, label=e.label)


def save(fig: Figure, path: Path, dpi: int = 110) -> None:
    """Write the figure as SVG or PNG (by ``path``'s suffix), the same bytes for the same numbers."""
    import matplotlib

    path.parent.mkdir(parents=True, exist_ok=True)
    with matplotlib.rc_context(STYLE):
        fig.savefig(path, dpi=dpi, bbox_inches="tight", metadata=METADATA.get(path.suffix, {}))
