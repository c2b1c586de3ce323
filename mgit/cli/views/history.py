"""Views of history: `log`, `show`, `lineage`, `du` and `reflog` (schemas mgit.log/1, mgit.show/1,
mgit.lineage/1, mgit.du/1, mgit.reflog/1)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from rich.filesize import decimal
from rich.markup import escape
from rich.table import Table
from rich.tree import Tree as RichTree

from mgit.cli.views import Printout, document
from mgit.cli.views.diff import stat_json, stat_lines, stat_text
from mgit.cli.views.graph import Lanes
from mgit.cli.views.logformat import LogFormat, expand, preset_lines, when
from mgit.cli.views.merge import plan_text, record_of

if TYPE_CHECKING:
    from mgit.diff.model import ModelDiff
    from mgit.graph.objects import CommitInfo
    from mgit.maintenance.du import StoreUsage, Usage
    from mgit.repo import ShowInfo

PlanOf = Callable[[str], "dict | None"]  # a commit's merge record (None: not a merge)


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


def merge_notes(plan_of: PlanOf, c: CommitInfo) -> list[str]:
    """For --graph: what a merge made of its parents (method, base, experts and weights),
    from its plan: mgit's addition to git's graph."""
    doc = plan_of(c.id) if len(c.parents) > 1 else None
    if doc is None:
        return []
    plan = record_of(doc)
    weights = plan.parameters.get("weight")
    base = f"base {plan.base[:12]}" if plan.base else f"reference {(plan.reference or '?')[:12]}"
    lines = [f"merge ({plan.method}) of {base}"]
    for k, e in enumerate(plan.experts):
        w = f" × {weights[k]}" if weights is not None else ""
        lines.append(f"+ {e.name} {e.commit[:12]}{w}")
    return lines


def log_json(commits: list[CommitInfo], stats: dict[str, ModelDiff] | None = None) -> dict:
    listed = []
    for c in commits:
        doc = {"id": c.id, "parents": list(c.parents), "author": c.author, "time": c.time, "message": c.message}
        if stats is not None:
            doc["stat"] = stat_json(stats[c.id])
        listed.append(doc)
    return document("mgit.log/1", {"commits": listed})


def ref_labels(
    head: str | None, current: str | None, branches: dict[str, str], tags: dict[str, str], remotes: dict[str, str]
) -> dict[str, list[str]]:
    """Commit id → the names decorating it in `log` (and ``%d``, ``%D``), as git's: first
    ``HEAD -> BRANCH`` (``HEAD`` when detached), then every other branch, remote-tracking
    branch (``origin/main``) and tag (``tag: v1``), in git's order (by full ref name, last first)."""
    refs = [(f"refs/heads/{n}", n, sha) for n, sha in branches.items() if n != current]
    refs += [(f"refs/remotes/{n}", n, sha) for n, sha in remotes.items()]
    refs += [(f"refs/tags/{n}", f"tag: {n}", sha) for n, sha in tags.items()]
    labels: dict[str, list[str]] = {}
    if head is not None:
        labels[head] = [f"HEAD -> {current}" if current else "HEAD"]
    for _, label, sha in sorted(refs, reverse=True):
        labels.setdefault(sha, []).append(label)
    return labels


@dataclass
class LogStyle:
    """How `log` shows each commit: ``oneline`` (mgit's: short id, refs, subject) or ``fmt``
    (a git preset or template); ``notes``: a merge's plan under it (--graph)."""

    fmt: LogFormat = field(default_factory=LogFormat)
    oneline: bool = False
    notes: bool = False


def entry_lines(
    c: CommitInfo, labels: list[str], style: LogStyle, plan_of: PlanOf, stat: list[str] | None
) -> list[str]:
    """One commit's lines, as rich markup (plain text escaped)."""
    deco = f" ({', '.join(labels)})" if labels else ""
    fmt = style.fmt
    if style.oneline:
        lines = [f"[yellow]{c.id[:12]}[/yellow][cyan]{escape(deco)}[/cyan] {escape(c.summary)}"]
    elif fmt.template is not None:
        lines = [escape(line) for line in expand(fmt.template, c, labels).split("\n")]
    else:
        lines = [escape(line) for line in preset_lines(fmt.preset, c, deco)]
        if fmt.preset != "oneline":
            lines[0] = f"[yellow]commit {c.id}[/yellow][cyan]{escape(deco)}[/cyan]"
    if style.notes:
        lines[1:1] = [escape(line) for line in merge_notes(plan_of, c)]
    if stat is not None:
        stat = [escape(line) for line in stat]
        if style.oneline or fmt.preset == "oneline":
            lines += stat
        elif fmt.template is not None:
            lines += ["", *stat]
        else:
            lines += [*stat, ""]
    return lines


def log_text(
    commits: list[CommitInfo],
    labels: dict[str, list[str]],
    style: LogStyle,
    plan_of: PlanOf,
    parents: dict[str, tuple[str, ...]] | None = None,
    stats: dict[str, ModelDiff] | None = None,
) -> Printout:
    """`log`: each commit in ``style``; with ``parents`` (--graph) beside its lanes and edges."""
    p = Printout()
    lanes = Lanes() if parents is not None else None
    for c in commits:
        stat = stat_lines(stats[c.id]) if stats is not None else None
        lines = entry_lines(c, labels.get(c.id, []), style, plan_of, stat)
        if lanes is not None and parents is not None:
            lines = lanes.place(c.id, parents[c.id]).lines(lines)
        for line in lines:
            p.out(line, markup=True)
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


def show_json(info: ShowInfo, usage: Usage | None, plan: dict | None, stat: ModelDiff | None = None) -> dict:
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
    if stat is not None:
        doc["stat"] = stat_json(stat)
    return document("mgit.show/1", doc)


def show_text(info: ShowInfo, usage: Usage | None, plan: dict | None, stat: ModelDiff | None = None) -> Printout:
    """`show`: the commit, then its files (logical and stored bytes) or, with ``stat``
    (--stat), what it changed against its first parent; storage and the merge plan after."""
    p = Printout()
    c = info.commit
    p.out(f"[yellow]commit {c.id}[/yellow]", markup=True)
    if c.parents:
        p.out("Parents: " + " ".join(parent[:12] for parent in c.parents))
    p.out(f"Author:  {c.author}\nDate:    {when(c.time, c.timezone)}\n", markup=False)
    for line in c.message.rstrip().splitlines():
        p.out(f"    {line}", markup=False)
    if stat is not None:
        p.out()
        p.extend(stat_text(stat))
    else:
        p.extend(files_table(info))
    if usage is not None:
        p.out(f"storage: {usage_line(usage)}")
    if plan is not None:
        p.extend(plan_text(plan))
    return p


def files_table(info: ShowInfo) -> Printout:
    p = Printout()
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
