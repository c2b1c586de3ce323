"""A small line chart written as self-contained SVG text: lines with markers, horizontal reference lines, a legend.

Why: a benchmark's figure belongs beside its tables in docs/, diffable and identical for identical
numbers. matplotlib is in neither environment the harness creates for the peers, its SVG output
carries a date and generated ids (a rerun with the same numbers would change the file), and a
chart of a few lines needs only axes, ticks and paths: this writes exactly that, with no dependency.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf")
DASHED, DOTTED = "6,4", "2,3"


@dataclass(frozen=True)
class Series:
    """A line through ``points`` (x, y), drawn in x order."""

    label: str
    points: Sequence[tuple[float, float]]
    color: str
    dash: str = ""  # an SVG stroke-dasharray; "" is solid
    marker: str = "circle"  # "circle", "square" or "" (none)


@dataclass(frozen=True)
class HLine:
    """A horizontal reference line across the plot (e.g. a tool whose cost does not depend on x)."""

    label: str
    y: float
    color: str
    dash: str = DOTTED


def nice_step(span: float, ticks: int = 5) -> float:
    """A tick step of 1, 2 or 5 × 10^n giving about ``ticks`` intervals over ``span``."""
    if span <= 0:
        return 1.0
    raw = span / ticks
    power = 10 ** math.floor(math.log10(raw))
    return next(m * power for m in (1, 2, 5, 10) if m * power >= raw)


def fmt_tick(v: float) -> str:
    return f"{v:.0f}" if v == int(v) else f"{v:g}"


def line_chart(
    series: Sequence[Series],
    hlines: Sequence[HLine] = (),
    *,
    title: str,
    x_label: str,
    y_label: str,
    x_ticks: Sequence[tuple[float, str]],
    log_x: bool = False,
    width: int = 800,
    height: int = 440,
) -> str:
    """The chart as SVG text. x spans the ticks given (log scale with ``log_x``); y spans 0 to the
    largest value, with ticks of 1, 2 or 5 × 10^n."""
    if not x_ticks:
        raise ValueError("a chart needs x ticks")
    left, right, top, bottom = 64, 280, 40, 56  # the legend sits in the right margin
    pw, ph = width - left - right, height - top - bottom
    fx = math.log10 if log_x else float
    xs = [fx(x) for x, _ in x_ticks] + [fx(x) for s in series for x, _ in s.points]
    x0, x1 = min(xs), max(xs)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    pad = (x1 - x0) * 0.05  # points at the ends stay off the frame
    x0, x1 = x0 - pad, x1 + pad
    ymax = max([y for s in series for _, y in s.points] + [h.y for h in hlines] + [0.0])
    step = nice_step(ymax or 1.0)
    ytop = step * math.ceil((ymax or 1.0) * 1.05 / step)

    def px(x: float) -> float:
        return left + (fx(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + ph - y / ytop * ph

    out = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
        f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="12">',
        f'<rect width="{width}" height="{height}" fill="white"/>',
        f'<text x="{left + pw / 2:.1f}" y="22" text-anchor="middle" font-size="14">{escape(title)}</text>',
    ]
    ticks_y = [i * step for i in range(int(round(ytop / step)) + 1)]
    for y in ticks_y:
        out.append(f'<line x1="{left}" y1="{py(y):.1f}" x2="{left + pw}" y2="{py(y):.1f}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{left - 6}" y="{py(y) + 4:.1f}" text-anchor="end">{fmt_tick(y)}</text>')
    for x, label in x_ticks:
        out.append(f'<line x1="{px(x):.1f}" y1="{top}" x2="{px(x):.1f}" y2="{top + ph}" stroke="#e5e5e5"/>')
        out.append(f'<text x="{px(x):.1f}" y="{top + ph + 16}" text-anchor="middle">{escape(label)}</text>')
    out.append(f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" fill="none" stroke="#333"/>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 14}" text-anchor="middle">{escape(x_label)}</text>')
    out.append(
        f'<text x="16" y="{top + ph / 2:.1f}" text-anchor="middle" '
        f'transform="rotate(-90 16 {top + ph / 2:.1f})">{escape(y_label)}</text>'
    )
    legend: list[tuple[str, str, str, str]] = []
    for h in hlines:
        out.append(
            f'<line x1="{left}" y1="{py(h.y):.1f}" x2="{left + pw}" y2="{py(h.y):.1f}" stroke="{h.color}" '
            f'stroke-width="1.5" stroke-dasharray="{h.dash}"/>'
        )
        legend.append((h.label, h.color, h.dash, ""))
    for s in series:
        pts = sorted(s.points)
        dash = f' stroke-dasharray="{s.dash}"' if s.dash else ""
        path = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in pts)
        out.append(f'<polyline points="{path}" fill="none" stroke="{s.color}" stroke-width="2"{dash}/>')
        out += [marker(s.marker, px(x), py(y), s.color) for x, y in pts if s.marker]
        legend.append((s.label, s.color, s.dash, s.marker))
    lx = left + pw + 16
    for i, (label, color, dash, mark) in enumerate(legend):
        y = top + 8 + 18 * i
        dash_attr = f' stroke-dasharray="{dash}"' if dash else ""
        out.append(f'<line x1="{lx}" y1="{y}" x2="{lx + 28}" y2="{y}" stroke="{color}" stroke-width="2"{dash_attr}/>')
        if mark:
            out.append(marker(mark, lx + 14, y, color))
        out.append(f'<text x="{lx + 36}" y="{y + 4}">{escape(label)}</text>')
    out.append("</svg>")
    return "\n".join(out) + "\n"


def marker(kind: str, x: float, y: float, color: str) -> str:
    if kind == "square":
        return f'<rect x="{x - 3.5:.1f}" y="{y - 3.5:.1f}" width="7" height="7" fill={quoteattr(color)}/>'
    return f'<circle cx="{x:.1f}" cy="{y:.1f}" r="3.5" fill={quoteattr(color)}/>'


def write_svg(path: Path, svg: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(svg)
