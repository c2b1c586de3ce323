"""Views of branch merges (``merge REV``, ``pull``, ``revert``): the result (schema
mgit.branch-merge/2), the conflicts that stopped one (schema mgit.merge-conflicts/2) with the
commands that settle them, and ``merge-base``'s lines."""

from __future__ import annotations

from typing import TYPE_CHECKING

from mgit.cli.views import Printout, document

if TYPE_CHECKING:
    from mgit.merge.threeway.conflicts import Conflict, Settled
    from mgit.merge.threeway.snapshots import FileChange
    from mgit.ops.threeway import BranchMerge


def _conflict(c: Conflict) -> dict:
    return {
        "where": c.where,
        "path": c.path,
        "tensor": c.tensor if c.key is None else None,
        "key": c.key,
        "kind": c.kind,
        "method_can_merge": c.method_can_merge,
    }


def _settled(s: Settled) -> dict:
    return {**_conflict(s.conflict), "by": s.by}


def _sides(r: BranchMerge) -> dict:
    return {"op": r.op, "rev": r.rev, "target": r.target, "theirs": r.theirs, "bases": r.bases}


def _change(c: FileChange) -> dict:
    return {"how": c.how, "tensors": c.tensors}


def merge_json(r: BranchMerge) -> dict:
    done = {"commit": r.commit, "branch": r.branch, "old_head": r.old_head}
    changed = {path: _change(c) for path, c in r.changed.items()}
    settled = {"settled": [_settled(s) for s in r.settled], "method": r.method, "seed": r.seed}
    return document("mgit.branch-merge/2", {"kind": r.kind, **_sides(r), **done, "changed": changed, **settled})


def conflicts_json(r: BranchMerge) -> dict:
    found = {"committed": False, "conflicts": [_conflict(c) for c in r.conflicts]}
    return document("mgit.merge-conflicts/2", {**_sides(r), "head": r.old_head, **found})


def merge_text(r: BranchMerge) -> Printout:
    """git's lines: ``Already up to date.``, ``Updating A..B`` / ``Fast-forward``, ``Merge made
    by the 'three-way' strategy.`` or ``[branch id] subject`` (a revert); then what changed."""
    p = Printout()
    if r.kind == "up-to-date":
        p.out("Already up to date.")
        return p
    if r.kind == "fast-forward":
        p.out(f"Updating {(r.old_head or '0' * 7)[:7]}..{r.target[:7]}\nFast-forward")
    elif r.kind == "reverted":
        p.out(f"[{r.branch or 'detached HEAD'} {str(r.commit)[:7]}] reverted {r.rev} ({r.target[:12]})")
    else:
        p.out("Merge made by the 'three-way' strategy.")
    side = "the reverted commit's parent" if r.op == "revert" else r.rev
    for path, change in sorted(r.changed.items()):
        p.out(f" {path} | {_how(change, side, r.method)}", markup=False, highlight=False)
    for s in r.settled:
        how = r.method if s.by == "method" else s.by
        p.out(f" settled {s.conflict.where} by {how}", markup=False, highlight=False)
    if r.seed is not None:
        p.out(f" {r.method} ran with seed {r.seed} (--seed {r.seed} makes it again)", markup=False)
    return p


def _how(c: FileChange, side: str, method: str | None) -> str:
    """One changed path: ``from SIDE``, ``deleted``, ``merged``, and for a safetensors file
    merged per tensor how many tensors came from where."""
    if not c.tensors:
        return {"theirs": f"from {side}", "deleted": "deleted"}.get(c.how, "merged")
    counts = {how: sum(v == how for v in c.tensors.values()) for how in ("theirs", "method", "deleted")}
    words = {"theirs": f"from {side}", "method": f"by {method}", "deleted": "deleted"}
    return "merged per tensor: " + ", ".join(f"{n} {words[how]}" for how, n in counts.items() if n)


def conflicts_text(r: BranchMerge) -> Printout:
    """One ``CONFLICT (kind): ...`` line each, then how to settle them: the same command again,
    or for a stash, which is no commit of history, by way of a branch made where it was made."""
    p = Printout()
    for c in r.conflicts:
        p.out(f"CONFLICT ({c.kind}): {c.describe()}", markup=False, highlight=False)
    if r.op == "stash apply":
        return _stash_advice(p, r)
    again = f"mgit revert {r.rev}" if r.op == "revert" else f"mgit merge {r.rev}"
    p.out("Automatic merge failed: nothing was committed; the working tree and index are as they were.")
    p.out("Settle the conflicts by running it again with:", markup=False)
    p.out(f"  {again} --ours PATTERN | --theirs PATTERN   (fnmatch over PATH or PATH:TENSOR; bare: all)", markup=False)
    if any(c.method_can_merge for c in r.conflicts):
        p.out(f"  {again} --method task_arithmetic   (tensors: base + both changes)", markup=False)
    return p


def _stash_advice(p: Printout, r: BranchMerge) -> Printout:
    """A stash that conflicts with HEAD is kept: it applies as it was made on its own base (git's
    `stash branch`), and from there it is a branch that `merge` settles like any other."""
    back = r.branch or (r.old_head or "HEAD")[:12]
    made_on = r.bases[0][:12] if r.bases else "BASE"
    p.out("Automatic merge failed: nothing changed and the stash is kept; the working tree and index are as they were.")
    p.out("Apply it where it was made, commit it on a branch there, and merge that branch:", markup=False)
    lines = (
        f"  mgit checkout -b BRANCH {made_on} && mgit stash pop {r.rev}   (applies as it was made)",
        f"  then `mgit add`, `mgit commit`, `mgit checkout {back}`, and",
        "  mgit merge BRANCH --ours PATTERN | --theirs PATTERN   (fnmatch over PATH or PATH:TENSOR; bare: all)",
    )
    for line in lines:
        p.out(line, markup=False)
    return p


def merge_base_lines(bases: list[str]) -> str:
    return "\n".join(bases)
