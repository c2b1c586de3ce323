"""The merge plan as recorded in the merge commit: a JSON blob at the reserved root entry
``.mgit-plan`` (schema ``mgit.plan/1``, documented in docs/merging.md). It travels with
the commit, so `mgit show`, `mgit lineage` and any clone can tell how a model was made."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mgit.graph.snapshot import Snapshot
from mgit.merge.plan import MergePlan
from mgit.model.dtypes import lookup
from mgit.model.manifest import TensorManifest

if TYPE_CHECKING:  # torch stays out of the everyday commands' start-up
    from mgit.merge.engine import Execution, MergeSpec
    from mgit.merge.methods import MergeMethod

PLAN_SCHEMA = "mgit.plan/1"


@dataclass(frozen=True)
class MergeSetup:
    method: MergeMethod
    params: dict[str, Any]  # resolved: defaults filled, expert parameters one per expert
    base_commit: str
    expert_commits: list[str]
    expert_names: list[str]
    base_snap: Snapshot
    base_ref: str | None = None  # as given (None: HEAD)
    params_for: Callable[[str], dict[str, Any]] | None = None  # per-tensor parameters (configs)
    config: dict[str, Any] | None = None  # the mergekit config as read
    dtype: str | None = None
    out_dtype: str | None = None
    # A method without a base (linear, passthrough) given none: the first expert's commit, whose
    # model is the reference for dtypes, chunking and non-tensor files (base_commit is then only
    # the first parent, HEAD, and nothing of it is used). None: the base is the reference.
    reference: str | None = None


def plan_record(plan: MergePlan, spec: MergeSpec, setup: MergeSetup, run: Execution | None, version: str) -> dict:
    tensors = []
    for tp in plan.tensors:
        entry: dict[str, Any] = {
            "name": tp.name,
            "file": tp.file,
            "chunks": len(tp.base.chunks),
            "expert_chunks_read": [len(r) for r in tp.reads],
            "expert_bytes_estimated": tp.read_bytes,
        }
        if tp.missing:
            entry["missing_in"] = tp.missing
        if plan.budget is not None and plan.budget.limit is not None:
            entry["expert_chunks_chosen"] = [list(r) for r in tp.reads]
            share = plan.budget.tensors.get(tp.name)
            if share is not None:
                entry["budget"] = {
                    "candidates": share.candidates,
                    "chosen": share.chosen,
                    "captured_share": share.captured / share.energy if share.energy > 0 else 1.0,
                    "error_bound": share.bound if plan.budget.error_bound is not None else None,
                }
        if setup.params_for is not None:
            resolved = setup.method.resolve(setup.params_for(tp.name), len(setup.expert_commits))
            entry["parameters"] = {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(resolved.items())}
        if run is not None:
            entry["decision"] = run.decisions.get(tp.name)
        tensors.append(entry)
    record: dict[str, Any] = {
        "schema": PLAN_SCHEMA,
        "mgit_version": version,
        "method": setup.method.name,
        "parameters": {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(spec.params.items())},
        "seed": spec.seed,
        "dtype": spec.dtype,
        "out_dtype": spec.out_dtype,
        "model": plan.model,
        "base": setup.base_commit if setup.reference is None else None,
        "experts": [{"name": n, "commit": c} for n, c in zip(setup.expert_names, setup.expert_commits, strict=True)],
        "bytes": {
            "base_estimated": plan.base_bytes,
            "output_logical": sum(_output_bytes(tp.base, spec) for tp in plan.tensors),
            "experts_estimated": plan.expert_bytes,
            "expert_chunks_estimated": plan.expert_chunks,
            "expert_passes": plan.expert_passes,
        },
        "tensors": tensors,
    }
    if setup.reference is not None:
        record["reference"] = setup.reference
    if plan.budget is not None:
        record["budget"] = plan.budget.to_json()
    if setup.config is not None:
        record["config"] = setup.config
    if run is not None:
        record["bytes"] |= {
            "base_measured": run.base_bytes_read,
            "experts_measured": run.expert_bytes_read,
            "expert_chunks_measured": run.expert_chunks_read,
        }
        if run.expert_bytes_fetched is not None:
            record["bytes"] |= {"base_fetched": run.base_bytes_fetched, "experts_fetched": run.expert_bytes_fetched}
    return record


def _output_bytes(base: TensorManifest, spec: MergeSpec) -> int:
    """Bytes of a merged tensor: floating tensors in the result dtype, others copied as they are."""
    given, out = lookup(base.dtype), lookup(spec.result_dtype(base.dtype))
    if given is None or out is None or not given.name.startswith(("F", "BF")):
        return base.nbytes
    return base.nbytes // given.bits * out.bits
