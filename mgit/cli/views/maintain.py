"""Views of maintenance: `gc`, `fsck` (schema mgit.fsck/1) and what `fsck --repair` did."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.filesize import decimal

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.maintenance.gc import GcReport
    from mgit.repo import Repair


def gc_line(report: GcReport) -> str:
    c = report.chunks
    return (
        f"removed {c.removed_chunks} chunk(s) and {report.objects_removed} object(s); kept {c.kept_chunks} chunk(s); "
        f"chunk store {decimal(c.bytes_before)} → {decimal(c.bytes_after)}"
        + (f"; removed {report.leftovers_removed} leftover temporary file(s)" if report.leftovers_removed else "")
        + (f"; dropped {report.sketches_removed} sketch(es) of removed commits" if report.sketches_removed else "")
    )


def reflog_expired_line(n: int) -> str:
    return f"forgot {n} reflog entr{'y' if n == 1 else 'ies'}; run `mgit gc` to reclaim what they kept alive"


def fsck_json(problems: list[str], partial: bool, leftovers: list[str]) -> dict:
    payload = {"ok": not problems, "problems": problems, "partial": partial, "leftovers": leftovers}
    return document("mgit.fsck/1", payload)


def fsck_text(problems: list[str], partial: bool, leftovers: list[str]) -> Printout:
    p = Printout()
    for problem in problems:
        p.out(f"[red]problem:[/red] {problem}", markup=True, highlight=False)
    for path in leftovers:
        p.err(
            f"note: leftover temporary file {path} (left by a killed mgit; not damage): `mgit gc` removes it",
            markup=False,
            highlight=False,
        )
    ok = "ok: every object and chunk verified"
    if partial:
        ok += " (a partial clone: chunks not fetched yet are not checked)"
    p.out(ok if not problems else f"{len(problems)} problem(s) found")
    return p


def repair_text(r: Repair) -> Printout:
    """What ``fsck --repair`` did to chunks, then to git objects, refs and packs."""
    p = Printout()
    remotes = ", ".join(f"{n} from {name}" for name, n in r.from_remotes.items()) or "none from remotes"
    rebuilt = f"rebuilt {len(r.rebuilt_indexes)} pack index(es); " if r.rebuilt_indexes else ""
    p.err(
        f"repair: {rebuilt}dropped {len(r.dropped)} damaged chunk(s); recovered {r.from_worktree} from the "
        f"working tree, {remotes}; {len(r.missing)} still missing"
    )
    for cid, who in sorted(r.missing.items()):
        p.err(f"  still missing: chunk {cid[:12]} of {who}", markup=False)
    for line in graph_repair_lines(r):
        p.err(line, markup=False)
    return p


def graph_repair_lines(r: Repair) -> list[str]:
    """What ``fsck --repair`` did to git objects, refs and packs, one line each."""
    g = r.graph
    lines = [f"repair: rewrote damaged pack(s): {', '.join(r.rewritten_packs)}"] if r.rewritten_packs else []
    lines += [f"repair: dropped the lost staged statistics of {path}" for path in g.index_stats]
    lines += [f"repair: removed damaged git object {sha[:12]}, which nothing reaches" for sha in g.removed]
    if g.packed_lines:
        lines.append(f"repair: rewrote packed-refs without what names no readable ref ({', '.join(g.packed_lines)})")
    if g.reflog_lines:
        lines.append(f"repair: dropped {g.reflog_lines} reflog line(s) that could not be read or name a lost object")
    if g.objects or g.objects_lost or g.refs or g.refs_lost:
        counts = {name: list(g.objects.values()).count(name) for name in sorted(set(g.objects.values()))}
        by_remote = ", ".join(f"{n} from {name}" for name, n in counts.items())
        lines.append(
            f"repair: restored {len(g.objects)} git object(s){f' ({by_remote})' if by_remote else ''} and "
            f"{len(g.refs)} ref(s); {len(g.objects_lost)} object(s) and {len(g.refs_lost)} ref(s) still damaged"
        )
    lines += [f"  restored: {ref} from {source}" for ref, source in sorted(g.refs.items())]
    lines += [f"  still damaged: git object {sha[:12]} needed by {who}" for sha, who in sorted(g.objects_lost.items())]
    lines += [f"  still damaged: {ref}: {why}" for ref, why in sorted(g.refs_lost.items())]
    return lines
