"""Views of a merge's pre-flight (`mgit merge --check`): schema mgit.merge-check/1 and its text."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from rich.filesize import decimal
from rich.markup import escape

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.merge.preflight import MergeCheck


def check_json(check: MergeCheck) -> dict:
    """What the checked merge would do, for scripts."""
    return document(
        "mgit.merge-check/1",
        {
            "ok": True,
            "method": check.method,
            "config": check.config,
            "model": check.model,
            "seed": check.seed,
            "reference": check.reference,
            "inputs": [
                {"role": i.role, "name": i.name, "commit": i.commit, "parameters": _plain(i.parameters)}
                for i in check.inputs
            ],
            "parameters": _plain(check.parameters),
            "tensors": check.tensors,
            "files": check.files,
            "bytes": {"base": check.base_bytes, "experts": check.expert_bytes},
        },
    )


def _plain(params: dict[str, Any]) -> dict[str, Any]:
    """Parameters as JSON writes them (tuples as lists)."""
    return {k: list(v) if isinstance(v, tuple) else v for k, v in params.items()}


def _params(params: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v}" for k, v in params.items())


def check_text(check: MergeCheck) -> Printout:
    """The checked merge in a few lines: the method, each input and its commit and parameters,
    what a full merge reads."""
    p = Printout()
    experts = [i for i in check.inputs if i.role == "expert"]
    p.out(f"check passed: {check.method} of {len(experts)} expert(s); nothing was read or merged")
    for i in check.inputs:
        own = f"  {escape(_params(i.parameters))}" if i.parameters else ""
        p.out(f"  {i.role:<6}  {i.commit[:12]}  {escape(i.name)}{own}")
    if check.reference is not None:
        p.out(f"  reference (no base): {check.reference[:12]}, the first expert's model")
    if check.parameters:
        p.out(f"  parameters: {escape(_params(check.parameters))}")
    p.out(
        f"  {check.tensors} tensor(s) in {check.files} file(s) of {escape(check.model or '.')}; "
        f"a full merge reads {decimal(check.base_bytes + check.expert_bytes)} "
        f"(base {decimal(check.base_bytes)}, experts {decimal(check.expert_bytes)})"
    )
    return p
