"""What merges leave in the history: the plan a merge commit records (schema mgit.plan/1)
and the derivation tree (lineage) those records make, down to the roots."""

from __future__ import annotations

from typing import Any

from mgit.context import Context
from mgit.graph import records


def lineage(ctx: Context, rev: str = "HEAD", depth: int = 50) -> dict[str, Any]:
    """The derivation tree of a revision: each commit with its inputs, down to the roots.

    A merge commit's inputs are its base and its experts (with method and weights from
    its plan); another commit's input is its first parent. A commit met a second time is
    marked ``"seen": true`` instead of being expanded again.

    Args:
        rev: The revision whose derivation is shown.
        depth: How many generations the walk goes down at most.

    Returns:
        The tree as nested dicts: each node's commit, role, summary and ``inputs`` (a merge's
        method, parameters and seed too).

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    from mgit.merge.record import PlanRecord

    seen: set[str] = set()

    def node(sha: str, role: str, left: int) -> dict[str, Any]:
        info = ctx.graph.commit(sha)
        out: dict[str, Any] = {"commit": sha, "role": role, "summary": info.summary, "inputs": []}
        if sha in seen:
            return out | {"seen": True}
        seen.add(sha)
        doc = merge_record(ctx, sha)
        if left <= 0:
            return out | {"truncated": bool(info.parents)}
        if doc is not None:
            plan = PlanRecord.from_json(doc)
            weights = plan.parameters.get("weight")
            out |= {"method": plan.method, "parameters": plan.parameters, "seed": plan.seed}
            if plan.base is not None:
                out["inputs"].append(node(plan.base, "base", left - 1))
            else:  # a method without a base: the commit it was made on is history, not an input
                out["inputs"].append(node(info.parents[0], "parent", left - 1))
            for k, expert in enumerate(plan.experts):
                role = f"expert {expert.name}"
                if weights is not None:
                    role += f" (weight {weights[k]})"
                out["inputs"].append(node(expert.commit, role, left - 1))
        elif info.parents:
            out["inputs"].append(node(info.parents[0], "parent", left - 1))
        return out

    return node(ctx.refs.resolve(rev), "revision", depth)


def merge_record(ctx: Context, rev: str = "HEAD") -> dict[str, Any] | None:
    """The plan a merge commit recorded: method, parameters, experts, budget and what it left out.

    Args:
        rev: The commit.

    Returns:
        The plan record as stored (``mgit.plan/1``), or None for a commit that is no merge.

    Raises:
        RevisionError: ``rev`` names no commit.
    """
    return records.read_plan(ctx.graph, ctx.graph.commit(ctx.refs.resolve(rev)).tree)
