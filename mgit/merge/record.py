"""The merge plan as recorded in the merge commit: a JSON blob at the reserved root entry
``.mgit-plan`` (schema ``mgit.plan/1``, documented in docs/merging.md). It travels with
the commit, so `mgit show`, `mgit lineage` and any clone can tell how a model was made."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, NamedTuple

from mgit.merge.carry import base_reads
from mgit.merge.plan import MergePlan
from mgit.model.dtypes import lookup
from mgit.model.manifest import TensorManifest
from mgit.version import __version__

if TYPE_CHECKING:  # torch stays out of the everyday commands' start-up
    from mgit.merge.execution import Execution
    from mgit.merge.request import MergeSetup

PLAN_SCHEMA = "mgit.plan/1"


@dataclass(frozen=True)
class ExpertRef:
    """One expert of a merge: the name it was given (a revision or a path) and its commit."""

    name: str
    commit: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "commit": self.commit}


@dataclass(frozen=True)
class PlanRecord:
    """A merge commit's plan record (schema ``mgit.plan/1``).

    ``bytes`` holds the estimated reads (and, once executed, the measured and fetched ones) under
    the keys docs/merging.md lists; ``tensors`` one entry per output tensor as documented there;
    ``budget`` the budget report's JSON. :meth:`to_json` writes the keys in their recorded order
    (``reference``, ``budget`` and ``config`` only when set); :meth:`from_json` reads any
    ``mgit.plan/1`` record (keys an older mgit did not write read as None, keys a later one adds
    are kept in ``extra`` and written back after the others)."""

    mgit_version: str
    method: str
    parameters: dict[str, Any]
    seed: int
    dtype: str | None
    out_dtype: str | None
    model: str
    base: str | None  # None: a method without a base (the first parent is history, not an input)
    experts: list[ExpertRef]
    bytes: dict[str, Any]
    tensors: list[dict[str, Any]]
    reference: str | None = None
    budget: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    schema: str = PLAN_SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "schema": self.schema,
            "mgit_version": self.mgit_version,
            "method": self.method,
            "parameters": self.parameters,
            "seed": self.seed,
            "dtype": self.dtype,
            "out_dtype": self.out_dtype,
            "model": self.model,
            "base": self.base,
            "experts": [e.to_json() for e in self.experts],
            "bytes": self.bytes,
            "tensors": self.tensors,
        }
        for key, value in (("reference", self.reference), ("budget", self.budget), ("config", self.config)):
            if value is not None:
                record[key] = value
        return record | self.extra

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> PlanRecord:
        known = {f.name for f in fields(cls)} - {"extra"}
        return cls(
            mgit_version=doc.get("mgit_version", ""),
            method=doc["method"],
            parameters=doc.get("parameters", {}),
            seed=doc.get("seed", 0),
            dtype=doc.get("dtype"),
            out_dtype=doc.get("out_dtype"),
            model=doc.get("model", ""),
            base=doc.get("base"),
            experts=[ExpertRef(e["name"], e["commit"]) for e in doc.get("experts", [])],
            bytes=doc.get("bytes", {}),
            tensors=doc.get("tensors", []),
            reference=doc.get("reference"),
            budget=doc.get("budget"),
            config=doc.get("config"),
            schema=doc.get("schema", PLAN_SCHEMA),
            extra={k: v for k, v in doc.items() if k not in known},
        )


def build_record(plan: MergePlan, setup: MergeSetup, run: Execution | None, version: str) -> PlanRecord:
    """The record of ``plan`` made from ``setup`` (and, once executed, of what ``run`` read)."""
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
                if share.sketch_ranks:  # per expert: the rank of the sketch read instead of chunks (0: none)
                    entry["budget"]["sketch_ranks"] = [share.sketch_ranks.get(k, 0) for k in range(len(tp.reads))]
                    entry["budget"]["sketch_bytes"] = [u.cost if u is not None else 0 for u in tp.sketches]
        if setup.params_for is not None:
            resolved = setup.resolved_params(tp.name)
            entry["parameters"] = {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(resolved.items())}
        if run is not None:
            entry["decision"] = run.decisions.get(tp.name)
        tensors.append(entry)
    sizes: dict[str, Any] = {
        "base_estimated": sum(base_reads(tp, setup) for tp in plan.tensors),
        "output_logical": sum(_output_bytes(tp.base, setup) for tp in plan.tensors),
        "experts_estimated": plan.expert_bytes,
        "expert_chunks_estimated": plan.expert_chunks,
        "expert_passes": plan.expert_passes,
    }
    if run is not None:
        sizes |= {
            "base_measured": run.base_bytes_read,
            "experts_measured": run.expert_bytes_read,
            "expert_chunks_measured": run.expert_chunks_read,
            "output_chunks_computed": run.chunks_computed,
            "output_chunks_carried": run.chunks_carried,
            "output_bytes_computed": run.bytes_computed,
        }
        if run.expert_bytes_fetched is not None:
            sizes |= {"base_fetched": run.base_bytes_fetched, "experts_fetched": run.expert_bytes_fetched}
    return PlanRecord(
        mgit_version=version,
        method=setup.method.name,
        parameters={k: list(v) if isinstance(v, tuple) else v for k, v in sorted(setup.params.items())},
        seed=setup.seed,
        dtype=setup.dtype,
        out_dtype=setup.out_dtype,
        model=plan.model,
        base=setup.base_commit if setup.reference is None else None,
        experts=[ExpertRef(n, c) for n, c in zip(setup.expert_names, setup.expert_commits, strict=True)],
        bytes=sizes,
        tensors=tensors,
        reference=setup.reference,
        budget=plan.budget.to_json() if plan.budget is not None else None,
        config=setup.config,
    )


class PlannedMerge(NamedTuple):
    """A merge planned (``Repository.merge_plan``): the plan and the request it resolved to; it
    unpacks as ``plan, setup``. Nothing edits it: a budget, fetch sizes or a run make new values."""

    plan: MergePlan
    setup: MergeSetup

    def record(self, run: Execution | None = None) -> PlanRecord:
        """The plan record (``mgit.plan/1``) of this plan, and once executed of what ``run`` read."""
        return build_record(self.plan, self.setup, run, __version__)


def _output_bytes(base: TensorManifest, setup: MergeSetup) -> int:
    """Bytes of a merged tensor: floating tensors in the result dtype, others copied as they are."""
    given, out = lookup(base.dtype), lookup(setup.result_dtype(base.dtype))
    if given is None or out is None or not given.name.startswith(("F", "BF")):
        return base.nbytes
    return base.nbytes // given.bits * out.bits
