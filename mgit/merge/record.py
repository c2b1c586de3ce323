"""The merge plan as recorded in the merge commit: a JSON blob at the reserved root entry
``.mgit-plan`` (schema ``mgit.plan/1``, documented in docs/merging.md). It travels with
the commit, so `mgit show`, `mgit lineage` and any clone can tell how a model was made."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, NamedTuple

from mgit.merge.carry import base_reads
from mgit.merge.plan import MergePlan, TensorPlan
from mgit.model.dtypes import lookup
from mgit.model.manifest import TensorManifest
from mgit.version import __version__

if TYPE_CHECKING:  # torch stays out of the everyday commands' start-up
    from mgit.merge.execution import Execution
    from mgit.merge.request import MergeRequest, MergeSetup
    from mgit.merge.sketch.use import SketchUse

PLAN_SCHEMA = "mgit.plan/1"


@dataclass(frozen=True)
class ExpertRef:
    """One expert of a merge: the name it was given (a revision or a path) and its commit."""

    name: str
    commit: str

    def to_json(self) -> dict[str, str]:
        return {"name": self.name, "commit": self.commit}


@dataclass(frozen=True)
class ReadSizes:
    """A plan record's ``bytes``: reads estimated by the plan and, once executed, measured.

    None marks a key the record does not hold (a plan not yet executed, a store that fetched
    nothing, an older mgit); :meth:`to_json` writes the others in their recorded order and
    keys a later mgit adds are kept in ``extra``."""

    base_estimated: int = 0  # the fields in their recorded order: to_json writes them so
    output_logical: int | None = None
    experts_estimated: int = 0
    expert_chunks_estimated: int = 0
    expert_passes: int | None = None
    base_measured: int | None = None
    experts_measured: int | None = None
    expert_chunks_measured: int | None = None
    output_chunks_computed: int | None = None
    output_chunks_carried: int | None = None
    output_bytes_computed: int | None = None
    base_fetched: int | None = None
    experts_fetched: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def base_read(self) -> int:
        """Base bytes read: measured once executed, else the plan's estimate."""
        return self.base_estimated if self.base_measured is None else self.base_measured

    def to_json(self) -> dict[str, Any]:
        held = ((f.name, getattr(self, f.name)) for f in fields(self) if f.name != "extra")
        return {k: v for k, v in held if v is not None} | self.extra

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ReadSizes:
        return cls(**{k: v for k, v in doc.items() if k in _FIELDS[cls]}, extra=_extra(cls, doc))


@dataclass(frozen=True)
class TensorBudgetEntry:
    """A budgeted plan's per-tensor ``budget``: its candidate and chosen expert chunks, the share of
    Σ‖wΔ‖² captured, the error bound (None for a method without one) and, where sketches were
    offered, each expert's sketch rank (0: none) and sketch bytes."""

    candidates: int
    chosen: int
    captured_share: float
    error_bound: float | None
    sketch_ranks: list[int] | None = None
    sketch_bytes: list[int] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "candidates": self.candidates,
            "chosen": self.chosen,
            "captured_share": self.captured_share,
            "error_bound": self.error_bound,
        }
        if self.sketch_ranks is not None:
            doc |= {"sketch_ranks": self.sketch_ranks, "sketch_bytes": self.sketch_bytes}
        return doc | self.extra

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TensorBudgetEntry:
        known = {k: v for k, v in doc.items() if k in _FIELDS[cls]}
        return cls(**{"error_bound": None} | known, extra=_extra(cls, doc))


@dataclass(frozen=True)
class TensorEntry:
    """One output tensor of a plan record (``tensors``): where it lives, what each expert is read
    for, and once executed the decision (``merged``/``copied``; None for a tensor of a file carried
    whole). ``executed`` says whether the record holds a decision at all (a plan, or ``--dry-run``,
    does not); optional parts are None where the record leaves them out."""

    name: str
    file: str
    chunks: int
    expert_chunks_read: list[int]
    expert_bytes_estimated: list[int]
    missing_in: list[int] | None = None
    expert_chunks_chosen: list[list[int]] | None = None
    budget: TensorBudgetEntry | None = None
    parameters: dict[str, Any] | None = None
    sources: dict[str, Any] | None = None
    decision: str | None = None
    executed: bool = False
    # per expert: the sketch a budget read instead of chunks (None: none), as sketch_read writes it
    sketches: list[dict[str, Any] | None] | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def unchanged(self) -> bool:
        """Identical to the base in every expert: no expert chunk read, and none differing either
        (a budget's ``candidates`` counts chunks it skipped or read as a sketch)."""
        return not any(self.expert_chunks_read) and not (self.budget is not None and self.budget.candidates)

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {
            "name": self.name,
            "file": self.file,
            "chunks": self.chunks,
            "expert_chunks_read": self.expert_chunks_read,
            "expert_bytes_estimated": self.expert_bytes_estimated,
        }
        optional = (
            ("missing_in", self.missing_in),
            ("expert_chunks_chosen", self.expert_chunks_chosen),
            ("budget", self.budget.to_json() if self.budget is not None else None),
            ("parameters", self.parameters),
            ("sketches", self.sketches),
            ("sources", self.sources),
        )
        doc |= {k: v for k, v in optional if v is not None}
        if self.executed:
            doc["decision"] = self.decision
        return doc | self.extra

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> TensorEntry:
        known = {k: v for k, v in doc.items() if k in _FIELDS[cls]}
        if "budget" in known:
            known["budget"] = TensorBudgetEntry.from_json(known["budget"])
        return cls(**known, executed="decision" in doc, extra=_extra(cls, doc))


def _field_names(cls: type) -> frozenset[str]:
    return frozenset(f.name for f in fields(cls)) - {"extra", "executed"}


_FIELDS: dict[type, frozenset[str]] = {cls: _field_names(cls) for cls in (ReadSizes, TensorBudgetEntry, TensorEntry)}


def _extra(cls: type, doc: dict[str, Any]) -> dict[str, Any]:
    """The keys of ``doc`` a later mgit wrote that ``cls`` does not know: kept, written back last."""
    return {k: v for k, v in doc.items() if k not in _FIELDS[cls]}


@dataclass(frozen=True)
class PlanRecord:
    """A merge commit's plan record (schema ``mgit.plan/1``).

    ``bytes`` holds the estimated reads (and, once executed, the measured and fetched ones);
    ``tensors`` one entry per output tensor, both with the keys docs/merging.md lists;
    ``budget`` the budget report's JSON (``BudgetReport.to_json``). :meth:`to_json` writes the keys
    in their recorded order (``reference``, ``budget``, ``config``, ``lora``, ``tokenizer`` and
    ``request`` only when set; ``rng``, after ``seed``, only for a random method: older records of one lack it, and
    drew as ``"mgit"``);
    :meth:`from_json` reads any ``mgit.plan/1`` record (keys an older mgit did not write read as
    None, keys a later one adds are kept in ``extra`` and written back after the others)."""

    mgit_version: str
    method: str
    parameters: dict[str, Any]
    seed: int
    dtype: str | None
    out_dtype: str | None
    model: str
    base: str | None  # None: a method without a base (the first parent is history, not an input)
    experts: list[ExpertRef]
    bytes: ReadSizes
    tensors: list[TensorEntry]
    reference: str | None = None
    budget: dict[str, Any] | None = None
    config: dict[str, Any] | None = None
    request: dict[str, Any] | None = None  # the request's other options (request_options); None: an older mgit
    rng: str | None = None  # a random method's draws: "mgit" or "mergekit" (None: deterministic, or older)
    lora: list[dict[str, Any]] | None = None  # the MODEL+LORA inputs (mgit.merge.lora.LoraInput)
    tokenizer: dict[str, Any] | None = None  # the merged vocabulary (mgit.ops.merge_vocab)
    schema: str = PLAN_SCHEMA
    extra: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        record: dict[str, Any] = {
            "schema": self.schema,
            "mgit_version": self.mgit_version,
            "method": self.method,
            "parameters": self.parameters,
            "seed": self.seed,
            **({"rng": self.rng} if self.rng is not None else {}),
            "dtype": self.dtype,
            "out_dtype": self.out_dtype,
            "model": self.model,
            "base": self.base,
            "experts": [e.to_json() for e in self.experts],
            "bytes": self.bytes.to_json(),
            "tensors": [t.to_json() for t in self.tensors],
        }
        optional = ("reference", self.reference), ("budget", self.budget), ("config", self.config), ("lora", self.lora)
        for key, value in (*optional, ("tokenizer", self.tokenizer), ("request", self.request)):
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
            bytes=ReadSizes.from_json(doc.get("bytes", {})),
            tensors=[TensorEntry.from_json(t) for t in doc.get("tensors", [])],
            reference=doc.get("reference"),
            budget=doc.get("budget"),
            config=doc.get("config"),
            request=doc.get("request"),
            rng=doc.get("rng"),
            lora=doc.get("lora"),
            tokenizer=doc.get("tokenizer"),
            schema=doc.get("schema", PLAN_SCHEMA),
            extra={k: v for k, v in doc.items() if k not in known},
        )


def build_record(plan: MergePlan, setup: MergeSetup, run: Execution | None, version: str) -> PlanRecord:
    """The record of ``plan`` made from ``setup`` (and, once executed, of what ``run`` read)."""
    tensors = [_tensor_entry(tp, plan, setup, run) for tp in plan.tensors]
    sizes = ReadSizes(
        base_estimated=sum(base_reads(tp, setup) for tp in plan.tensors),
        output_logical=sum(_output_bytes(tp.base, setup) for tp in plan.tensors),
        experts_estimated=plan.expert_bytes,
        expert_chunks_estimated=plan.expert_chunks,
        expert_passes=plan.expert_passes,
    )
    if run is not None:
        sizes = replace(
            sizes,
            base_measured=run.base_bytes_read,
            experts_measured=run.expert_bytes_read,
            expert_chunks_measured=run.expert_chunks_read,
            output_chunks_computed=run.chunks_computed,
            output_chunks_carried=run.chunks_carried,
            output_bytes_computed=run.bytes_computed,
        )
        if run.expert_bytes_fetched is not None:
            sizes = replace(sizes, base_fetched=run.base_bytes_fetched, experts_fetched=run.expert_bytes_fetched)
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
        request=request_options(setup.request),
        rng=setup.request.rng if setup.method.random else None,
        lora=[applied.to_json() for applied in setup.loras] or None,
        tokenizer=setup.tokenizer,
    )


# MergeRequest fields the record holds elsewhere (experts, base, method, parameters, seed, rng, dtypes,
# model, the config as read) or that say where the commit goes rather than what it holds.
HELD_ELSEWHERE = frozenset(
    ("experts", "method", "base", "params", "config", "model", "seed", "rng", "dtype", "out_dtype")
    + ("branch", "message", "checkout")
)


def request_options(request: MergeRequest) -> dict[str, Any]:
    """The request's other options as JSON (``allow_missing``, the budget's, and any option a later
    mgit adds): recorded so that ``merge --verify`` hands the engine the request the merge had."""
    return {f.name: _jsonable(getattr(request, f.name)) for f in fields(request) if f.name not in HELD_ELSEWHERE}


def _jsonable(value: Any) -> Any:
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    return value


def sketch_read(use: SketchUse) -> dict[str, Any]:
    """How a record names a sketch a budget read instead of an expert's chunks: the prefix
    (``level``: a rank or a DARE tier count), the chunks it stood for, and the chunk ids of the
    blocks read (which tell that sketch from one that replaced it)."""
    return {"level": use.rank, "chunks": list(use.chunks), "blocks": [c.id for m in use.manifests() for c in m.chunks]}


def _tensor_entry(tp: TensorPlan, plan: MergePlan, setup: MergeSetup, run: Execution | None) -> TensorEntry:
    """The record of one output tensor: its reads, its budget share, its parameters, its decision."""
    chosen, budget, sketches = None, None, None
    if plan.budget is not None and plan.budget.limit is not None:
        chosen = [list(r) for r in tp.reads]
        if tp.sketches:
            sketches = [sketch_read(u) if u is not None else None for u in tp.sketches]
        share = plan.budget.tensors.get(tp.name)
        if share is not None:
            sketched = bool(share.sketch_ranks)  # per expert: the rank of the sketch read instead of chunks (0: none)
            budget = TensorBudgetEntry(
                candidates=share.candidates,
                chosen=share.chosen,
                captured_share=share.captured / share.energy if share.energy > 0 else 1.0,
                error_bound=share.bound if plan.budget.error_bound is not None else None,
                sketch_ranks=[share.sketch_ranks.get(k, 0) for k in range(len(tp.reads))] if sketched else None,
                sketch_bytes=[u.cost if u is not None else 0 for u in tp.sketches] if sketched else None,
            )
    parameters = None
    if setup.params_for is not None:
        resolved = setup.resolved_params(tp.name)
        parameters = {k: list(v) if isinstance(v, tuple) else v for k, v in sorted(resolved.items())}
    return TensorEntry(
        name=tp.name,
        file=tp.file,
        chunks=len(tp.base.chunks),
        expert_chunks_read=[len(r) for r in tp.reads],
        expert_bytes_estimated=tp.read_bytes,
        missing_in=tp.missing or None,
        expert_chunks_chosen=chosen,
        budget=budget,
        parameters=parameters,
        sources=tp.sources,
        decision=run.decisions.get(tp.name) if run is not None else None,
        executed=run is not None,
        sketches=sketches,
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
