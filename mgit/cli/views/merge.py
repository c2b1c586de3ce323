"""Views of merges: a recorded plan (`show`, `merge --dry-run`), its budget line, the per-layer
`--explain` table and the merge result (schema mgit.merge/1; the plan itself is mgit.plan/1,
written by mgit.merge.record)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.filesize import decimal
from rich.table import Table

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.merge.plan import MergePlan
    from mgit.merge.record import PlanRecord


def record_of(doc: dict) -> PlanRecord:
    """A stored plan record (``Repository.merge_record``) as the typed record views read."""
    from mgit.merge.record import PlanRecord

    return PlanRecord.from_json(doc)


def plan_text(plan: PlanRecord | dict) -> Printout:
    """A merge record (mgit.plan/1; as stored, a dict, is read as one) in a few lines: method,
    base, experts, bytes, decisions."""
    if isinstance(plan, dict):
        plan = record_of(plan)
    p = Printout()
    b = plan.bytes
    params = ", ".join(f"{k}={v}" for k, v in plan.parameters.items())
    rng = " (rng mergekit)" if plan.rng == "mergekit" else ""  # mgit's own draws go unsaid, as before
    p.out(f"\nmerge: {plan.method} ({params}), seed {plan.seed}{rng}, mgit {plan.mgit_version}")
    if plan.base is None:  # a method without a base: the first expert is the reference
        p.out(f"  base    none (reference: the first expert, {(plan.reference or '?')[:12]})")
    else:
        p.out(f"  base    {plan.base[:12]}")
    for e in plan.experts:
        p.out(f"  expert  {e.commit[:12]}  {e.name}")
    measured = f", measured {decimal(b.experts_measured)}" if b.experts_measured is not None else ""
    p.out(
        f"  expert reads: {b.expert_chunks_estimated} chunk(s), estimated {decimal(b.experts_estimated)}"
        f"{measured}; base reads {decimal(b.base_read)}"
        + (f"; output {decimal(b.output_logical)}" if b.output_logical is not None else "")  # older records lack it
    )
    decisions = _decisions(plan)
    if plan.budget is not None:
        p.out("  " + budget_line(plan.budget))
    untouched = _unchanged(plan)
    p.out(
        f"  tensors: {', '.join(f'{n} {d}' for d, n in sorted(decisions.items()))}; "
        f"{untouched} with every expert identical to the base (no expert read)"
    )
    return p


def _unchanged(record: PlanRecord) -> int:
    """Tensors identical to the base in every expert (``TensorEntry.unchanged``)."""
    return sum(1 for t in record.tensors if t.unchanged)


def _decisions(record: PlanRecord) -> dict[str, int]:
    """How many tensors got each decision (merged, copied, ...; "planned" before a merge)."""
    decisions: dict[str, int] = {}
    for t in record.tensors:
        decisions[t.decision or "planned"] = decisions.get(t.decision or "planned", 0) + 1
    return decisions


def budget_line(b: dict) -> str:
    """One line on a budgeted plan: limit, planned vs full bytes, captured share, error bound."""
    limit = "no budget" if b["limit_bytes"] is None else f"budget {b['given']} = {decimal(b['limit_bytes'])}"
    rounding = b["rounding_allowance"]
    bound = (
        ""
        if b["error_bound"] is None
        else (
            f"; error bound {b['error_bound']:.4g} (+ rounding {'unknown' if rounding is None else f'{rounding:.3g}'})"
        )
    )
    best = (
        f" (any choice within the budget: at most {b['captured_share_max']:.1%})"
        if b["limit_bytes"] is not None and "captured_share_max" in b
        else ""
    )
    analyzed = b["analyze"]
    extra = (
        f"; analyzed {analyzed['pairs']} chunk pair(s), reading {decimal(analyzed['bytes_read'])}"
        if analyzed["pairs"]
        else ""
    )
    estimated = analyzed.get("pairs_by_source", {}).get("estimated", 0)  # older records lack it
    if estimated:
        extra += (
            f"; ‖Δ‖ of {estimated} chunk pair(s) estimated from chunk norms (analysis capped at "
            f"{decimal(analyzed['cap_bytes'])}; reading them all: {decimal(analyzed['priced_bytes'])})"
        )
    shares = b.get("captured_share_per_expert") or []  # older records lack it
    per_expert = f"; per expert {' / '.join(f'{x:.0%}' for x in shares)}" if b["limit_bytes"] and shares else ""
    sk = b.get("sketches")
    if sk and sk["used"]:
        extra += f"; {sk['used']} of {sk['offered']} expert tensor(s) read as sketches ({decimal(sk['bytes'])})"
    fairness = ", per-expert" if b.get("fairness") == "per-expert" else ""
    return (
        f"{limit} ({b['select']}{fairness}): {b['chunks_chosen']} of {b['chunks_candidate']} expert chunk(s), "
        f"{decimal(b['expert_bytes_planned'])} of {decimal(b['expert_bytes_full'])}; "
        f"captured {b['captured_share']:.1%} of Σ‖wΔ‖²{best}{per_expert}{bound}{extra}"
    )


def explain_table(plan: MergePlan) -> Printout:
    """Per layer: candidate and chosen chunks, bytes, captured share and error bound."""
    from mgit.merge.budget.report import TensorBudget
    from mgit.model.layers import layer_of

    report = plan.budget
    assert report is not None
    rows: dict[str, TensorBudget] = {}
    sketches: dict[str, int] = {}  # layer → expert tensors read as sketches
    for tp in plan.tensors:
        tb = report.tensors.get(tp.name)
        if tb is None:
            continue
        index = layer_of(tp.name)
        layer = "—" if index is None else str(index)
        row = rows.setdefault(layer, TensorBudget())
        for name in ("candidates", "chosen", "full_bytes", "planned_bytes", "energy", "captured", "bound"):
            setattr(row, name, getattr(row, name) + getattr(tb, name))
        sketches[layer] = sketches.get(layer, 0) + len(tb.sketch_ranks)
    sketched = ["sketched"] if report.sketches_used else []  # a column only where sketches were read
    table = Table(show_edge=False, pad_edge=False)
    for col in ("layer", "chunks", "chosen", *sketched, "naive", "planned", "captured", "bound"):
        table.add_column(col, justify="left" if col == "layer" else "right")
    affine = report.error_bound is not None
    for layer, row in sorted(rows.items(), key=lambda kv: (kv[0] != "—", int(kv[0]) if kv[0] != "—" else -1)):
        share = row.captured / row.energy if row.energy > 0 else 1.0
        extra = [str(sketches[layer])] if sketched else []
        table.add_row(
            layer,
            str(row.candidates),
            str(row.chosen),
            *extra,
            decimal(row.full_bytes),
            decimal(row.planned_bytes),
            f"{share:.1%}",
            f"{row.bound:.4g}" if affine else "—",
        )
    p = Printout()
    p.out(table)
    return p


def reads_table(plan: MergePlan, record: PlanRecord) -> Printout:
    """`merge --dry-run`: per tensor, the chunks and bytes each expert would be read for."""
    if any(tp.sources is not None for tp in plan.tensors):
        return _sources_table(plan)
    table = Table(show_edge=False, pad_edge=False)
    for col in ("tensor", *[e.name for e in record.experts]):
        table.add_column(col, justify="left" if col == "tensor" else "right", overflow="fold")
    for tp in plan.tensors:
        cells = [
            f"sketch {u.label()} {decimal(b)}" if u is not None else f"{len(r)}/{len(tp.base.chunks)} {decimal(b)}"
            for r, b, u in zip(tp.reads, tp.read_bytes, [tp.sketch(k) for k in range(len(tp.reads))], strict=True)
        ]
        table.add_row(tp.name, *cells)
    p = Printout()
    p.out(table)
    return p


def _sources_table(plan: MergePlan) -> Printout:
    """A `slices:` merge's `--dry-run`: per output tensor, the source tensors it is merged from
    (the base's first, marked) and the chunks and bytes each expert would be read for."""
    table = Table(show_edge=False, pad_edge=False)
    for col in ("tensor", "from", "expert reads"):
        table.add_column(col, justify="right" if col == "expert reads" else "left", overflow="fold")
    for tp in plan.tensors:
        assert tp.sources is not None
        base = tp.sources["base"]
        named = [f"{s['model']}:{s['tensor']}" for s in tp.sources["experts"]]
        if base is not None:
            named.insert(0, f"base {base['model']}:{base['tensor']}")
        reads = ", ".join(
            f"{len(r)}/{len(tp.base.chunks)} {decimal(b)}" for r, b in zip(tp.reads, tp.read_bytes, strict=True)
        )
        table.add_row(tp.name, "\n".join(named), reads)
    p = Printout()
    p.out(table)
    return p


def merge_json(sha: str, branch: str | None, record: PlanRecord, checked_out: bool = True) -> dict:
    """A merge's result for scripts: the commit, the bytes read and the plan in summary."""
    return document(
        "mgit.merge/1",
        {
            "commit": sha,
            "branch": branch,
            "checked_out": checked_out,
            "method": record.method,
            "parameters": record.parameters,
            "seed": record.seed,
            "base": record.base,
            "experts": [dict(sorted(e.to_json().items())) for e in record.experts],  # as stored: keys sorted
            "bytes": dict(sorted(record.bytes.to_json().items())),  # as stored: keys sorted
            "plan": {
                "tensors": len(record.tensors),
                "decisions": _decisions(record),
                "untouched": _unchanged(record),
                "budget": record.budget,
            },
        },
    )


def merge_text(sha: str, branch: str | None, record: PlanRecord, checked_out: bool = True) -> Printout:
    """The merge's result: stdout, as every result (progress and warnings go to stderr)."""
    p = Printout()
    b = record.bytes
    p.out(
        f"merged {len(record.experts)} expert(s) with {record.method} → {sha[:12]} "
        f"on {branch or 'HEAD'}{'' if checked_out else ' (not checked out)'}; "
        f"read {decimal(b.experts_measured or 0)} of expert chunks ({b.expert_chunks_measured}), "
        f"{decimal(b.base_read)} of base chunks"
    )
    if b.output_chunks_computed is not None:  # recorded since mgit computes only what the plan changes
        p.out(
            f"  output: {b.output_chunks_computed} chunk(s) computed, {b.output_chunks_carried} carried "
            f"from the base ({decimal(b.output_bytes_computed or 0)} computed)"
        )
    if record.budget is not None:
        p.out("  " + budget_line(record.budget))
    return p


def _captured_as(kind: str) -> str:
    """What a sketch's captured share measures (docs/merging.md, "Sketches")."""
    return "of ‖Δ‖² captured" if kind == "lowrank" else "of ‖Δ‖² in value (‖Δ‖·‖Δ kept‖, DARE's)"


def sketch_text(result: dict) -> Printout:
    """What ``mgit sketch`` made (``result``: SketchResult.to_json())."""
    p = Printout()
    if not result["created"]:
        p.out(f"{result['commit'][:12]} already has this sketch ({result['sketch'][:12]})")
        return p
    p.out(
        f"sketched {result['tensors_sketched']} tensor(s) of {result['commit'][:12]} against "
        f"{result['parent'][:12]} ({result['kind']}, {result['share'] * 100:g}%) → {result['sketch'][:12]}: "
        f"{decimal(result['stored_bytes'])} stored for {decimal(result['expert_bytes'])} of changed chunks, "
        f"{result['captured_share']:.1%} {_captured_as(result['kind'])}; "
        f"{result['tensors_exact']} tensor(s) left exact ({result['seconds']:.1f} s)"
    )
    return p
