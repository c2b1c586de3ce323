"""Tensors both sides changed, merged by a merge method (``merge REV --method``): the plan for
just those tensors, with the merge base as the base and [ours, theirs] as the experts, which
mgit.merge's engine runs as it runs a model merge's; then the manifests the run made, for the
:class:`~mgit.merge.threeway.conflicts.Resolution` that settles the conflicts with them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from mgit.graph.objects import Graph
from mgit.graph.snapshot import Entry, Snapshot
from mgit.merge.plan import MergePlan, plan_tensor
from mgit.merge.threeway.conflicts import Conflict
from mgit.model.filetree import load_safetensors
from mgit.model.manifest import TensorManifest

if TYPE_CHECKING:
    from mgit.merge.methods.base import MergeMethod


def side_params(method: MergeMethod, given: Mapping[str, Any]) -> dict[str, Any]:
    """The method's parameters for the two sides, resolved and checked: weights default to 1
    each (each side's whole change: task arithmetic gives base + Δours + Δtheirs)."""
    params = dict(given)
    if "weight" not in params and any(p.name == "weight" for p in method.params):
        params["weight"] = 1.0
    resolved = method.resolve(params, 2)
    method.check_params(resolved, method.name)
    return resolved


def conflict_plan(
    graph: Graph,
    conflicts: Sequence[Conflict],
    snaps: tuple[Snapshot, Snapshot, Snapshot],
    labels: list[str],
    cost: Callable[[str, set[str]], int],
    parsed: dict[str, TensorManifest],
) -> MergePlan:
    """The plan of the conflicting tensors alone: ``snaps`` are the merge base's, ours and
    theirs (``parsed``: the manifests already read, shared with the merge that found them)."""
    plan = MergePlan("", defaultdict(list), [])
    for c in conflicts:
        assert c.tensor is not None  # only tensor conflicts are a method's
        plan.files[c.path].append(c.tensor)
    for path, names in plan.files.items():
        base, ours, theirs = (load_safetensors(graph, snap[path].oid, path, parsed).manifests for snap in snaps)
        for name in names:
            plan.tensors.append(plan_tensor(path, name, base[name], [ours[name], theirs[name]], labels, False, cost))
    plan.files = dict(plan.files)
    return plan


def computed_manifests(
    graph: Graph, files: Mapping[str, Entry], plan: MergePlan, parsed: dict[str, TensorManifest]
) -> dict[tuple[str, str], str]:
    """(path, tensor) → the manifest blob id the run made for each planned tensor, out of the
    files it wrote (``files``: path → the new file's entry)."""
    made: dict[tuple[str, str], str] = {}
    for path, entry in files.items():
        ids = load_safetensors(graph, entry.oid, path, parsed).manifest_ids
        made |= {(path, name): ids[name] for name in plan.files[path]}
    return made
