"""Views of refs and the working tree's commit: `branch`, `tag`, `reset`, `checkout` (schemas
mgit.branch/1, mgit.tag/1, mgit.reset/1, mgit.checkout/1)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.filesize import decimal

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.repo import CheckoutResult, ResetResult
    from mgit.worktree.sparse import SparsePatterns


def tag_json(tags: dict[str, str]) -> dict:
    return document("mgit.tag/1", {"tags": [{"name": t, "commit": c} for t, c in sorted(tags.items())]})


def branch_json(current: str | None, head: str | None, local: dict[str, str], tracking: dict[str, str]) -> dict:
    return document(
        "mgit.branch/1",
        {
            "current": current,
            "head": head,
            "branches": [{"name": b, "commit": c, "current": b == current} for b, c in sorted(local.items())],
            "remote_branches": [{"name": b, "commit": c} for b, c in sorted(tracking.items())],
        },
    )


def branch_list(
    current: str | None, local: dict[str, str], tracking: dict[str, str], remotes_only: bool, list_all: bool
) -> Printout:
    """`mgit branch` listings: local (default), remote-tracking (-r) or both (-a)."""
    p = Printout()
    if not remotes_only:
        for b in sorted(local):
            p.out(f"* [green]{b}[/green]" if b == current else f"  {b}", markup=True)
    if remotes_only or list_all:
        prefix = "remotes/" if list_all else ""
        for b in sorted(tracking):
            p.out(f"  [red]{prefix}{b}[/red]", markup=True)
    return p


def reset_json(res: ResetResult) -> dict:
    return document("mgit.reset/1", vars(res))


def checkout_json(res: CheckoutResult, branch: str | None) -> dict:
    doc = {k: v for k, v in vars(res).items() if k != "cost"}
    doc["branch"] = branch
    doc["cost"] = None if res.cost is None else {**vars(res.cost), "total": res.cost.total}
    return document("mgit.checkout/1", doc)


def checkout_text(
    res: CheckoutResult,
    rev: str | None,
    new_branch: str | None,
    budget: str | None,
    is_branch: bool,
    patterns: SparsePatterns | None,
) -> Printout:
    """Where a switch left HEAD, what it wrote and read, and the sparse patterns kept.
    ``is_branch``: ``rev`` names a local branch."""
    p = Printout()
    summary = (
        f"{len(res.written)} file(s) written, {len(res.removed)} removed, {decimal(res.bytes_read)} read from the store"
    )
    if res.bytes_fetched:
        summary += f", {decimal(res.bytes_fetched)} fetched"
    if budget is not None:
        summary += f" (budget {budget})"
    if new_branch:
        p.err(f"Switched to a new branch '{new_branch}'")
    elif res.detached:
        p.err(
            f"[yellow]warning: HEAD is now detached at {res.commit[:12]}; "  # type: ignore[index]
            "commits made here belong to no branch (create one with `mgit checkout -b NAME`)[/yellow]",
            markup=True,
        )
    elif is_branch:
        p.err(f"Switched to branch '{rev}'")
    else:
        p.err(f"HEAD is at {res.commit[:12]}")  # type: ignore[index]
    p.err(summary)
    if patterns is not None:
        left = f"; {len(res.left_out)} file(s) with no tensor selected left out" if res.left_out else ""
        p.err(f"sparse checkout: {patterns.describe()}{left}", markup=False)
    return p
