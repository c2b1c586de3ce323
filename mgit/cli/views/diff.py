"""Views of `diff`: the tensor table, --stat, --by-layer and the mgit.diff/1 document."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.filesize import decimal
from rich.table import Table

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.diff.model import ModelDiff, TensorDiff
    from mgit.diff.summary import Group


def num(x: float | None, fmt: str = ".3g") -> str:
    return "" if x is None else format(x, fmt)


def bar(value: float | None, top: float, width: int = 20) -> str:
    if value is None or top <= 0:
        return ""
    filled = value / top * width
    return "█" * int(filled) + ("▌" if filled - int(filled) >= 0.5 else "")


def tensor_json(t: TensorDiff) -> dict:
    d = dict(vars(t))
    d["shape_a"] = list(t.shape_a) if t.shape_a is not None else None
    d["shape_b"] = list(t.shape_b) if t.shape_b is not None else None
    return d


def diff_json(result: ModelDiff, groups: list[Group]) -> dict:
    return document(
        "mgit.diff/1",
        {
            "a": result.a,
            "b": result.b,
            "numeric": result.numeric,
            "tensors": [tensor_json(t) for t in result.tensors],
            "files": [vars(f) for f in result.files],
            "groups": [
                {
                    "layer": g.layer,
                    "module": g.module,
                    "tensors": g.tensors,
                    "changed": g.changed,
                    "delta_norm": g.delta_norm,
                    "relative_change": g.relative_change,
                }
                for g in groups
            ],
        },
    )


def tensors_table(changed: list[TensorDiff], top: int) -> Printout:
    """The changed tensors, largest relative change first, at most ``top`` rows."""
    p = Printout()
    if not changed:
        return p
    ranked = sorted(changed, key=lambda t: (t.relative_change is None, -(t.relative_change or 0), t.name))
    table = Table(show_edge=False, pad_edge=False)
    for col in ("tensor", "status", "chunks", "‖Δ‖", "‖Δ‖/‖A‖", "cos(A,B)", "max|Δ|"):
        table.add_column(col, justify="left" if col in ("tensor", "status") else "right", overflow="fold")
    for t in ranked[:top]:
        status = t.status if t.status != "changed" or t.file_a == t.file_b else "changed, moved"
        table.add_row(
            t.name,
            status,
            f"{t.chunks_changed}/{t.chunks_total}",
            num(t.delta_norm),
            num(t.relative_change),
            num(t.cosine, ".6f"),
            num(t.max_abs_delta),
        )
    p.out(table)
    if len(ranked) > top:
        p.out(f"… and {len(ranked) - top} more changed tensor(s) (--top N shows more)")
    return p


def tensor_counts(changed: int, added: int, removed: int, moved: int) -> str:
    """'2 tensor(s) moved', '5 tensor(s): 3 changed, 2 moved' or 'no tensor changed'."""
    kinds = ("changed", "added", "removed", "moved")
    parts = [(n, what) for n, what in zip((changed, added, removed, moved), kinds, strict=True) if n]
    if len(parts) == 1:
        return f"{parts[0][0]} tensor(s) {parts[0][1]}"
    listed = ", ".join(f"{n} {what}" for n, what in parts)
    return f"{sum(n for n, _ in parts)} tensor(s): {listed}" if parts else "no tensor changed"


def _unified_start(lines: list[str]) -> int | None:
    """Where a file's unified diff starts (its ``---`` line), after any mode-change line."""
    return next((i for i, line in enumerate(lines) if line.startswith("--- ")), None)


def line_numbers(text: str | None) -> tuple[int, int] | None:
    """Lines added and removed by a unified diff; None when there is none (binary, large,
    only the mode changed)."""
    lines = (text or "").splitlines()
    start = _unified_start(lines)
    if start is None:
        return None
    body = lines[start + 2 :]
    return sum(1 for x in body if x.startswith("+")), sum(1 for x in body if x.startswith("-"))


def line_counts(text: str | None) -> str:
    """'+3 -1' of a unified diff (after any mode-change line), or the one-line summary of a
    binary or large file."""
    if not text:
        return ""
    lines = text.splitlines()
    start, numbers = _unified_start(lines), line_numbers(text)
    if start is None or numbers is None:
        return "; ".join(lines)
    return "; ".join([*lines[:start], f"+{numbers[0]} -{numbers[1]}"])


def stat_lines(result: ModelDiff) -> list[str]:
    """One line per file (tensor counts by kind, a large file's new chunks, or +/- lines), then
    the totals. A tensor that moved between shards unchanged counts as moved, never as changed."""
    lines = []
    for f in result.files:
        chunks = f"{f.chunks_changed} chunk(s), {decimal(f.bytes_changed)}" if f.chunks_changed else ""
        if f.kind == "safetensors":
            counts = tensor_counts(f.tensors_changed, f.tensors_added, f.tensors_removed, f.tensors_moved)
            lines.append(f" {f.path} | {f.status}: {counts}" + (f", {chunks}" if chunks else ""))
        else:
            counted = chunks or line_counts(f.text)
            lines.append(f" {f.path} | {f.status}" + (f": {counted}" if counted else ""))
    by_status: dict[str, int] = {}
    for t in result.changed:
        kind = t.status if t.status in ("added", "removed", "moved") else "changed"
        by_status[kind] = by_status.get(kind, 0) + 1
    changed, files = result.changed, [f for f in result.files if f.kind != "safetensors"]
    counts = tensor_counts(*(by_status.get(k, 0) for k in ("changed", "added", "removed", "moved")))
    total = sum(t.chunks_changed for t in changed) + sum(f.chunks_changed for f in files)
    size = sum(t.bytes_changed for t in changed) + sum(f.bytes_changed for f in files)
    lines.append(f" {len(result.files)} file(s) changed; {counts}; {total} chunk(s), {decimal(size)}")
    return lines


def stat_text(result: ModelDiff) -> Printout:
    p = Printout()
    for line in stat_lines(result):
        p.out(line, markup=False)
    return p


def stat_json(result: ModelDiff) -> list[dict]:
    """`log --stat` / `show --stat` in JSON: each file changed, its counts, no diff text
    (``lines_added``/``lines_removed``: a text file's, else null)."""
    out = []
    for f in result.files:
        doc = {k: v for k, v in vars(f).items() if k != "text"}
        added, removed = (line_numbers(f.text) if f.kind != "safetensors" else None) or (None, None)
        out.append({**doc, "lines_added": added, "lines_removed": removed})
    return out


NAME_STATUS = {"added": "A", "removed": "D", "modified": "M"}


def name_lines(result: ModelDiff, with_status: bool) -> list[str]:
    """`diff --name-only` / `--name-status`: each changed path (after A, D or M and a tab;
    printed as they are: a console would turn the tab into spaces)."""
    return [f"{NAME_STATUS[f.status]}\t{f.path}" if with_status else f.path for f in result.files]


def groups_table(groups: list[Group]) -> Printout:
    """--by-layer: one row per (layer, module) with a bar of its relative change."""
    top = max((g.relative_change or 0 for g in groups), default=0)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("layer", "module", "changed", "‖Δ‖/‖A‖", ""):
        table.add_column(col, justify="left" if col in ("module", "") else "right")
    for g in groups:
        table.add_row(
            "" if g.layer is None else str(g.layer),
            g.module,
            f"{g.changed}/{g.tensors}",
            num(g.relative_change),
            bar(g.relative_change, top),
        )
    p = Printout()
    p.out(table)
    return p
