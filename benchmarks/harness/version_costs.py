"""What storing each version cost each tool, as one record, and the tables that show it: bytes
per version and tool, mgit against the compressed size of what changed, and time per version.

Why: the version stores (stores.py) measure a cost per tool and version; reading them takes two
yardsticks computed from mgit's own numbers (A: what changed, compressed as the base was; B: the
same with modified tensors at the dense fine-tune's delta cost), so a version that costs more
than what changed stands out.
"""

from __future__ import annotations

from dataclasses import dataclass

from harness.report import fmt_mb, ratio, table
from harness.stores import Cost, encodings_cell
from harness.variants import Version
from harness.zipnn import Zipped

NA = "n/a"  # a ratio that cannot be computed


@dataclass
class VersionCosts:
    """What storing every version cost every tool (and ZipNN's sizes)."""

    versions: list[Version]  # the base first
    costs: dict[str, dict[str, Cost]]  # tool → version → cost
    totals: dict[str, int]  # tool → its store's size after every version
    zipped: dict[str, Zipped] | None = None  # ZipNN's sizes per version, when it ran


def stored_table(o: VersionCosts) -> str:
    tools = [t for t in ("mgit", "git + git-lfs", "dvc") if t in o.costs]
    head = ["version", "raw (MB)", "changed (MB)", "mgit (MB)", "mgit / raw", "mgit new chunks (MB)"]
    for t in tools[1:]:
        head += [f"{t} (MB)", f"{t} / raw"]
    if o.zipped:
        head += ["zipnn (MB)", "zipnn / raw", "zipnn, changed files (MB)"]
    rows = []
    for v in o.versions:
        m = o.costs["mgit"][v.name]
        cells = [
            v.name,
            fmt_mb(v.raw),
            fmt_mb(v.changed if v.parent else v.raw),
            fmt_mb(m.grown),
            ratio(m.grown, v.raw, 3, NA),
        ]
        cells.append(fmt_mb(m.new_chunks))
        for t in tools[1:]:
            cells += [fmt_mb(o.costs[t][v.name].grown), ratio(o.costs[t][v.name].grown, v.raw, 3, NA)]
        if o.zipped:
            z = o.zipped[v.name]
            cells += [fmt_mb(z.all_files), ratio(z.all_files, v.raw, 3, NA), fmt_mb(z.changed_files)]
        rows.append(cells)
    raw = sum(v.raw for v in o.versions)
    cells = [
        f"**all {len(o.versions)}**",
        fmt_mb(raw),
        "",
        fmt_mb(o.totals["mgit"]),
        ratio(o.totals["mgit"], raw, 3, NA),
        "",
    ]
    for t in tools[1:]:
        cells += [fmt_mb(o.totals[t]), ratio(o.totals[t], raw, 3, NA)]
    if o.zipped:
        z_all = sum(z.all_files for z in o.zipped.values())
        cells += [fmt_mb(z_all), ratio(z_all, raw, 3, NA), fmt_mb(sum(z.changed_files for z in o.zipped.values()))]
    rows.append(cells)
    return table(head, "l" + "r" * (len(head) - 1), rows)


@dataclass
class Reference:
    version: Version
    cost: Cost
    ref_a: float  # changed raw bytes × mgit's base stored/raw
    ref_b: float  # modified bytes × mgit's dense (stored/modified) + new bytes × base stored/raw


def references(o: VersionCosts) -> list[Reference]:
    by = {v.name: v for v in o.versions}
    base_ratio = o.costs["mgit"]["base"].grown / by["base"].raw
    delta_ratio = o.costs["mgit"]["dense"].grown / max(1, by["dense"].changed)
    out = []
    for v in o.versions[1:]:
        new, modified = v.changes.get("new_bytes", 0), v.changes.get("modified_bytes", 0)
        out.append(
            Reference(v, o.costs["mgit"][v.name], v.changed * base_ratio, modified * delta_ratio + new * base_ratio)
        )
    return out


def partial_table(o: VersionCosts) -> str:
    header = ["version", "changed tensors", "elements changed", "changed raw (MB)", "A: changed × base ratio (MB)"]
    header += ["B: delta-aware (MB)", "mgit (MB)", "mgit / A", "mgit / B", "mgit new chunks by encoding"]
    rows = []
    for r in references(o):
        c = r.version.changes
        share = c.get("changed_elements", 0) / c["elements"] if c.get("elements") else 0.0
        rows.append(
            [
                r.version.name,
                f"{c.get('changed_tensors', 0)} / {c.get('tensors', 0)}",
                f"{share:.1%}",
                fmt_mb(r.version.changed),
                fmt_mb(round(r.ref_a)),
                fmt_mb(round(r.ref_b)),
                fmt_mb(r.cost.grown),
                ratio(r.cost.grown, r.ref_a, 2, NA),
                ratio(r.cost.grown, r.ref_b, 2, NA),
                encodings_cell(r.cost.encodings),
            ]
        )
    return table(header, "lrrrrrrrrl", rows)


def times_table(o: VersionCosts) -> str:
    tools = list(o.costs)
    head = ["version", *(f"{t} (s)" for t in tools)] + (["zipnn compress (s)"] if o.zipped else [])
    rows = []
    for v in o.versions:
        cells = [v.name, *(f"{o.costs[t][v.name].seconds:.2f}" for t in tools)]
        if o.zipped:
            cells.append(f"{o.zipped[v.name].seconds:.2f}")
        rows.append(cells)
    return table(head, "l" + "r" * (len(head) - 1), rows)
