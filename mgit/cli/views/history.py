"""Views of history: `log`, `show`, `lineage`, `du` and `reflog` (schemas mgit.log/1, mgit.show/1,
mgit.lineage/1, mgit.du/1, mgit.reflog/1)."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from typing import TYPE_CHECKING

from rich.filesize import decimal
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree as RichTree

from mgit.cli.views import Printout, document
from mgit.cli.views.merge import plan_text

if TYPE_CHECKING:
    from mgit.graph.objects import CommitInfo
    from mgit.maintenance.du import StoreUsage, Usage
    from mgit.repo import ShowInfo

PlanOf = Callable[[str], "dict | None"]  # a commit's merge record (None: not a merge)


def when(t: int, tz: int) -> str:
    return datetime.fromtimestamp(t, timezone(timedelta(seconds=tz))).strftime("%a %b %d %H:%M:%S %Y %z")


def lineage_json(tree_doc: dict) -> dict:
    return document("mgit.lineage/1", {"root": tree_doc})


def lineage_text(tree_doc: dict) -> Printout:
    """The derivation tree, one node per line: commit, summary, role, merge method."""

    def label(n: dict) -> str:
        text = f"[yellow]{n['commit'][:12]}[/yellow] {escape(n['summary'])}  [dim]{escape(n['role'])}[/dim]"
        if "method" in n:
            text += f"  [cyan]merge: {n['method']}[/cyan]"
        if n.get("seen"):
            text += "  [dim](shown above)[/dim]"
        if n.get("truncated"):
            text += "  [dim]…[/dim]"
        return text

    def grow(branch: RichTree, n: dict) -> None:
        for child in n["inputs"]:
            grow(branch.add(label(child)), child)

    root = RichTree(label(tree_doc))
    grow(root, tree_doc)
    p = Printout()
    p.out(root)
    return p


def graph_lines(plan_of: PlanOf, c: CommitInfo) -> list[str]:
    """For --graph: a merge's experts drawn under it (from its plan)."""
    plan = plan_of(c.id) if len(c.parents) > 1 else None
    if plan is None:
        return []
    weights = plan["parameters"].get("weight")
    base = f"base {plan['base'][:12]}" if plan["base"] else f"reference {plan.get('reference', '?')[:12]}"
    lines = [f"|\\  merge ({plan['method']}) of {base}"]
    for k, e in enumerate(plan["experts"]):
        w = f" × {weights[k]}" if weights is not None else ""
        lines.append(f"| + {e['name']} {e['commit'][:12]}{w}")
    return lines


def log_json(commits: list[CommitInfo]) -> dict:
    return document(
        "mgit.log/1",
        {
            "commits": [
                {
                    "id": c.id,
                    "parents": list(c.parents),
                    "author": c.author,
                    "time": c.time,
                    "message": c.message,
                }
                for c in commits
            ]
        },
    )


def ref_labels(branches: dict[str, str], tags: dict[str, str]) -> dict[str, list[str]]:
    """Commit id → the branch and tag names decorating it in `log`."""
    labels: dict[str, list[str]] = {}
    for name, sha in branches.items():
        labels.setdefault(sha, []).append(name)
    for name, sha in tags.items():
        labels.setdefault(sha, []).append(f"tag: {name}")
    return labels


def log_entry(c: CommitInfo, labels: dict[str, list[str]], oneline: bool, graph: bool, plan_of: PlanOf) -> Printout:
    """One commit of `log` (full, --oneline, --graph or both)."""
    p = Printout()
    deco = f" [cyan]({', '.join(labels[c.id])})[/cyan]" if c.id in labels else ""
    star = "* " if graph else ""
    if oneline:
        p.out(f"{star}[yellow]{c.id[:12]}[/yellow]{deco} {escape(c.summary)}", markup=True)
        for line in graph_lines(plan_of, c) if graph else []:
            p.out(line, markup=False)
        return p
    if graph:
        p.out(f"* [yellow]commit {c.id}[/yellow]{deco}", markup=True)
        for line in graph_lines(plan_of, c):
            p.out(line, markup=False)
        p.out(f"| Author: {c.author}\n|", markup=False)
        for line in c.message.rstrip().splitlines():
            p.out(f"|     {line}", markup=False)
        p.out("|")
        return p
    p.out(f"[yellow]commit {c.id}[/yellow]{deco}", markup=True)
    if len(c.parents) > 1:
        p.out("Merge:  " + " ".join(parent[:12] for parent in c.parents))
    p.out(f"Author: {c.author}", markup=False)
    p.out(f"Date:   {when(c.time, c.timezone)}\n")
    for line in c.message.rstrip().splitlines():
        p.out(f"    {line}", markup=False)
    p.out()
    return p


def usage_json(u: Usage) -> dict:
    return {
        "logical_bytes": u.logical_bytes,
        "unique_bytes": u.unique_bytes,
        "stored_bytes": u.stored_bytes,
        "new_stored_bytes": u.new_stored_bytes,
        "chunks": u.chunks,
        "dedup_ratio": round(u.dedup_ratio, 4),
        "compression_ratio": round(u.compression_ratio, 4),
    }


def usage_line(u: Usage) -> str:
    return (
        f"{decimal(u.logical_bytes)} logical, {decimal(u.unique_bytes)} unique "
        f"(dedup {u.dedup_ratio:.2f}×), {decimal(u.stored_bytes)} stored (compression {u.compression_ratio:.2f}×), "
        f"{decimal(u.new_stored_bytes)} new vs parent"
    )


def show_json(info: ShowInfo, usage: Usage | None, plan: dict | None) -> dict:
    c = info.commit
    doc = {
        "id": c.id,
        "tree": c.tree,
        "parents": list(c.parents),
        "author": c.author,
        "time": c.time,
        "message": c.message,
        "files": [vars(f) for f in info.files],
        "logical_bytes": info.logical_bytes,
        "stored_bytes": info.stored_bytes,
    }
    if usage is not None:
        doc["usage"] = usage_json(usage)
    if plan is not None:
        doc["plan"] = plan
    return document("mgit.show/1", doc)


def show_text(info: ShowInfo, usage: Usage | None, plan: dict | None) -> Printout:
    p = Printout()
    c = info.commit
    p.out(f"[yellow]commit {c.id}[/yellow]", markup=True)
    if c.parents:
        p.out("Parents: " + " ".join(parent[:12] for parent in c.parents))
    p.out(f"Author:  {c.author}\nDate:    {when(c.time, c.timezone)}\n", markup=False)
    for line in c.message.rstrip().splitlines():
        p.out(f"    {line}", markup=False)
    table = Table(show_edge=False, pad_edge=False)
    for col, justify in (
        ("path", "left"),
        ("kind", "left"),
        ("tensors", "right"),
        ("logical", "right"),
        ("stored", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for f in info.files:
        table.add_row(
            f.path, f.kind, str(f.tensors) if f.tensors else "", decimal(f.logical_bytes), decimal(f.stored_bytes)
        )
    p.out()
    p.out(table)
    ratio = info.stored_bytes / info.logical_bytes if info.logical_bytes else 1.0
    p.out(
        f"\n{len(info.files)} file(s), {decimal(info.logical_bytes)} logical, "
        f"{decimal(info.stored_bytes)} stored ({ratio:.2f}×)"
    )
    if usage is not None:
        p.out(f"storage: {usage_line(usage)}")
    if plan is not None:
        p.extend(plan_text(plan))
    return p


def du_json(rows: list[tuple[str, Usage]], store: StoreUsage) -> dict:
    return document(
        "mgit.du/1",
        {
            "commits": [{"id": sha, **usage_json(u)} for sha, u in rows],
            "store": {
                "packs": store.packs,
                "chunks": store.chunks,
                "raw_bytes": store.raw_bytes,
                "stored_bytes": store.stored_bytes,
                "compression_ratio": round(store.compression_ratio, 4),
                "chunks_by_encoding": store.by_encoding,
            },
        },
    )


def du_text(rows: list[tuple[str, Usage]], store: StoreUsage) -> Printout:
    table = Table(show_edge=False, pad_edge=False)
    for col in ("commit", "logical", "unique", "stored", "new", "dedup", "compression"):
        table.add_column(col, justify="left" if col == "commit" else "right")
    for sha, u in rows:
        table.add_row(
            sha[:12],
            decimal(u.logical_bytes),
            decimal(u.unique_bytes),
            decimal(u.stored_bytes),
            decimal(u.new_stored_bytes),
            f"{u.dedup_ratio:.2f}×",
            f"{u.compression_ratio:.2f}×",
        )
    p = Printout()
    p.out(table)
    kinds = ", ".join(f"{n} {k}" for k, n in sorted(store.by_encoding.items()))
    p.out(
        f"\nstore: {store.chunks} chunks in {store.packs} pack(s) ({kinds}); {decimal(store.raw_bytes)} raw, "
        f"{decimal(store.stored_bytes)} stored (compression {store.compression_ratio:.2f}×)"
    )
    return p


Entry = tuple[str, str, int, str]  # a reflog entry: old, new, time, message


def reflog_json(ref: str, entries: list[Entry]) -> dict:
    listed = [{"old": old or None, "new": new, "time": t, "message": m} for old, new, t, m in entries]
    return document("mgit.reflog/1", {"ref": ref, "entries": listed})


def reflog_text(ref: str, full: str, entries: list[Entry]) -> Printout:
    """A ref's moves, newest first; ``full`` is the ref's full name (for the empty case)."""
    p = Printout()
    for i, (_, new, t, message) in enumerate(entries):
        stamp = datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M")
        p.out(f"{new[:12]} {ref}@{{{i}}} {stamp} {escape(message)}")
    if not entries:
        p.err(no_reflog(full, ref), markup=False)
    return p


def no_reflog(full: str, name: str) -> str:
    """Why a reflog is empty: a tag keeps none (as in git); other refs, no move recorded yet."""
    if full.startswith("refs/tags/"):
        return f"{full} has no reflog: tags keep none (as in git); `mgit show {name}` shows it"
    return f"{full} has no reflog entries yet"


def deleted_branch_note(name: str, full: str) -> str:
    """Where a deleted branch's reflog is kept, and how to get the branch back."""
    return (
        f"branch {name} was deleted; its reflog is kept as {full} until `mgit reflog expire` "
        f"(`mgit branch {name} {name}@{{1}}` restores it)"
    )
