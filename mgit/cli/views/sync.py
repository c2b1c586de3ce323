"""Views of remotes and transfers: `remote`, `push`, `fetch`, `pull`, `clone` (schemas
mgit.remote/1, mgit.transfer/1), and git fetch's lines for the refs a fetch moved."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from rich.filesize import decimal

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.ops.threeway import BranchMerge
    from mgit.remote.transfer import Transfer

Moves = dict[str, tuple[str | None, str]]  # remote ref → (old, new) of its local copy


def remote_json(remotes: dict[str, str]) -> dict:
    return document("mgit.remote/1", {"remotes": [{"name": n, "url": u} for n, u in sorted(remotes.items())]})


def remote_list(remotes: dict[str, str]) -> Printout:
    p = Printout()
    for name, url in sorted(remotes.items()):
        p.out(f"{name}\t{url}", markup=False)
    return p


def remote_verbose(remotes: dict[str, str]) -> list[str]:
    """`remote -v`: each remote's URL, for fetch and for push, tab-separated as git prints them
    (plain lines: rich would expand the tab)."""
    return [f"{name}\t{url} ({use})" for name, url in sorted(remotes.items()) for use in ("fetch", "push")]


def transfer_payload(kind: str, remote: str, t: Transfer) -> dict:
    return {
        "kind": kind,
        "remote": remote,
        "objects": t.objects,
        "chunks": t.chunks,
        "bytes": t.bytes,
        "present_objects": t.present_objects,
        "present_chunks": t.present_chunks,
        "refs": {
            r: {"old": old, "new": new}
            for r, (old, new) in sorted([*t.refs.items(), *((r, (old, None)) for r, old in t.deleted.items())])
        },
    }


def transfer_json(kind: str, remote: str, t: Transfer) -> dict:
    return document("mgit.transfer/1", transfer_payload(kind, remote, t))


def pull_json(remote: str, t: Transfer, merged: BranchMerge) -> dict:
    """The fetch's document, with where the merge left the branch (``merge``: its kind)."""
    head = {"branch": merged.branch, "old": merged.old_head, "new": merged.commit or merged.old_head}
    return document("mgit.transfer/1", {**transfer_payload("pull", remote, t), "head": head | {"merge": merged.kind}})


def transfer_line(verb: str, t: Transfer) -> str:
    return (
        f"{verb} {t.chunks} chunk(s) and {t.objects} object(s), {decimal(t.bytes)}; "
        f"{t.present_chunks} chunk(s) and {t.present_objects} object(s) were already there"
    )


def push_text(remote: str, t: Transfer) -> Printout:
    p = Printout()
    if t.refs or not t.deleted:
        p.err(transfer_line("sent", t))
    for ref, (old, new) in t.refs.items():
        what = "up to date" if old == new else f"{(old or '(new)')[:12]} → {new[:12]}"
        p.err(f"{remote} {ref.removeprefix('refs/heads/')}: {what}")
    for ref, old in t.deleted.items():
        p.err(f"{remote} {ref.removeprefix('refs/heads/')}: deleted (was {old[:12]})")
    return p


def ref_move_line(
    local: str | None, ref: str, old: str | None, new: str, fast_forward: Callable[[], bool]
) -> str | None:
    """git fetch's line for one of the remote's refs (``local``: its local copy, None if none):
    how that copy moved (None: it did not). ``fast_forward`` says whether old is an ancestor of new."""
    if local is None or old == new:
        return None
    src = ref.removeprefix("refs/heads/").removeprefix("refs/tags/")
    dst = local.removeprefix("refs/remotes/").removeprefix("refs/tags/")
    if ref.startswith("refs/tags/"):
        if old is None:
            return f" * {'[new tag]':<17} {src} -> {dst}"
        return f" ! {'[rejected]':<17} {src} -> {dst}  (would clobber existing tag)"
    if old is None:
        return f" * {'[new branch]':<17} {src} -> {dst}"
    if fast_forward():
        return f"   {f'{old[:7]}..{new[:7]}':<17} {src} -> {dst}"
    return f" + {f'{old[:7]}...{new[:7]}':<17} {src} -> {dst}  (forced update)"


def ref_moves(lines: list[str | None], url: Callable[[], str]) -> Printout:
    """Which local refs a fetch moved, as git prints them (nothing when none did)."""
    p = Printout()
    shown = [line for line in lines if line is not None]
    if shown:
        p.err(f"From {url()}", markup=False)
        for line in shown:
            p.err(line, markup=False)
    return p


def clone_line(url: str, dest: str, branch: str | None, got: Transfer, fetched: Transfer | None) -> str:
    """``fetched``: a partial clone's on-demand chunks for the checkout (None: a full clone)."""
    note = f" (partial: {decimal(fetched.bytes)} of chunks fetched for the checkout)" if fetched is not None else ""
    return f"cloned {url} into {dest}, on {branch}: {transfer_line('received', got)}{note}"
