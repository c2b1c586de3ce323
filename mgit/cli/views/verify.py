"""Views of `mgit merge --verify REV` (schema mgit.merge-verify/1): a merge commit compared with
its recomputation (mgit.ops.verify_merge.MergeVerification)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.filesize import decimal

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.ops.verify_merge import Difference, MergeVerification

VERIFY_SCHEMA = "mgit.merge-verify/1"


def verify_json(result: MergeVerification) -> dict[str, Any]:
    """The comparison as JSON: what was compared, by which mgit versions, and every difference."""
    return document(
        VERIFY_SCHEMA,
        {
            "commit": result.commit,
            "method": result.method,
            "identical": result.identical,
            "tensors": result.tensors,
            "chunks": result.chunks,
            "made_by": result.made_by,
            "verified_by": result.verified_by,
            "fetched_bytes": result.fetched_bytes,
            "unknown_options": result.unknown_options,
            "differences": [_difference_json(d) for d in result.differences],
        },
    )


def _difference_json(d: Difference) -> dict[str, Any]:
    return {
        "what": d.what,
        "file": d.file,
        "tensor": d.tensor,
        "chunk": d.chunk,
        "recorded": d.recorded,
        "recomputed": d.recomputed,
    }


def verify_text(result: MergeVerification) -> Printout:
    """``verified: N tensors bit-identical`` (with who made the merge, what was fetched); a
    merge that differs prints nothing here: its one error line names the first difference."""
    p = Printout()
    if result.unknown_options:
        p.err(f"warning: the merge recorded options this mgit does not know: {', '.join(result.unknown_options)}")
    if result.identical:
        fetched = "" if result.fetched_bytes is None else f"; fetched {decimal(result.fetched_bytes)}"
        p.out(
            f"verified: {result.tensors} tensors bit-identical ({result.chunks} chunks; {result.method} merge "
            f"{result.commit[:12]}, {versions(result)}{fetched})",
            markup=False,
            highlight=False,
        )
    return p


def versions(result: MergeVerification) -> str:
    """Which mgit made the merge, and which verified it when another one did."""
    made = f"made by mgit {result.made_by or '(unrecorded version)'}"
    return made if result.same_version else f"{made}, verified with mgit {result.verified_by}"


def mismatch_line(result: MergeVerification) -> str:
    """The error of a merge that does not verify: its first difference, and how many more."""
    first, more = result.differences[0], len(result.differences) - 1
    also = f" (and {more} more place(s); --json lists them)" if more else ""
    return f"merge {result.commit[:12]} does not verify ({versions(result)}): {describe(first)}{also}"


def describe(d: Difference) -> str:
    """One difference in a line."""
    if d.what == "header":
        return f"the header of {d.file} differs (its metadata or tensor order)"
    if d.what == "file":
        return f"file {d.file} differs ({_short(d.recorded)} recorded, {_short(d.recomputed)} recomputed)"
    where = f"tensor {d.tensor!r} in {d.file}"
    if d.what == "layout":
        return f"{where} differs: {d.recorded or 'absent'} recorded, {d.recomputed or 'absent'} recomputed"
    return f"{where} differs at chunk {d.chunk} ({_short(d.recorded)} recorded, {_short(d.recomputed)} recomputed)"


def _short(oid: str | None) -> str:
    return "nothing" if oid is None else oid[:12]
