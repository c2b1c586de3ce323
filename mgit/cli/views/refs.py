"""Views of refs and the working tree's commit: `branch`, `tag`, `reset`, `checkout` (schemas
mgit.branch/1, mgit.tag/1, mgit.reset/1, mgit.checkout/1)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.filesize import decimal
from rich.markup import escape

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.ops.refs import BranchInfo
    from mgit.ops.switching import RestoreResult
    from mgit.repo import CheckoutResult, ResetResult
    from mgit.worktree.sparse import SparsePatterns


def tag_json(tags: dict[str, str], messages: dict[str, str | None]) -> dict:
    """``commit``: what the tag names (an annotated tag peeled); ``message``: an annotated
    tag's (null: a lightweight tag)."""
    listed = [
        {"name": t, "commit": c, "annotated": messages.get(t) is not None, "message": messages.get(t)}
        for t, c in sorted(tags.items())
    ]
    return document("mgit.tag/1", {"tags": listed})


def tag_list(
    tags: dict[str, str], messages: dict[str, str | None], summary: Callable[[str], str], lines: bool
) -> Printout:
    """`mgit tag` (names), or with -n each name and the first line of its message, as git."""
    p = Printout()
    width = max((len(t) for t in tags), default=0)
    for t in sorted(tags):
        if not lines:
            p.out(t, markup=False)
            continue
        text = messages.get(t)
        first = (text.strip().splitlines() or [""])[0] if text is not None else summary(tags[t])
        p.out(f"{t:<{max(width, 15)}} {first}", markup=False)
    return p


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


def branch_verbose(
    current: str | None,
    info: list[BranchInfo],
    tracking: dict[str, str],
    remotes_only: bool,
    list_all: bool,
    subjects: dict[str, str],
) -> Printout:
    """`branch -v`: each branch, its commit and subject (``subjects``: of the remote-tracking
    branches' commits), names padded to one width, as git (-vv: ``[origin/main: ahead 1,
    behind 2]`` before the subject)."""
    p = Printout()
    prefix = "remotes/" if list_all else ""
    rows = [] if remotes_only else [(b.name, b.commit, _upstream(b) + b.subject, b.name == current) for b in info]
    if remotes_only or list_all:
        rows += [(f"{prefix}{t}", c, subjects[c], False) for t, c in sorted(tracking.items())]
    width = max((len(n) for n, *_ in rows), default=0)
    for name, commit, text, here in rows:
        line = f"{'*' if here else ' '} {name:<{width}} {commit[:12]} {text}"
        p.out(f"[green]{escape(line)}[/green]" if here else escape(line), markup=True)
    return p


def _upstream(b: BranchInfo) -> str:
    if b.upstream is None:
        return ""
    state = ", ".join(f"{word} {n}" for word, n in (("ahead", b.ahead), ("behind", b.behind)) if n)
    return f"[{b.upstream}{': ' + state if state else ''}] "


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


def restore_json(res: RestoreResult) -> dict:
    return document("mgit.restore/1", vars(res))


def restore_text(res: RestoreResult) -> Printout:
    """What `restore` changed, on stderr (git says nothing; a count helps on big trees)."""
    p = Printout()
    parts = [f"restored {len(res.written)} file(s)"]
    if res.removed:
        parts.append(f"removed {len(res.removed)}")
    if res.unstaged:
        parts.append(f"{len(res.unstaged)} index entr{'y' if len(res.unstaged) == 1 else 'ies'} reset")
    p.err(", ".join(parts))
    return p
