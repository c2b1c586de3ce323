"""A merge's pre-flight: the whole request checked against its inputs' headers and configs
(tensor manifests and config.json, no tensor data) before any tensor is read, so what would
fail at some tensor mid-merge fails first, in one line naming the input and the tensor or key.

Checked here: the number of experts the method takes, the working and output dtypes, the
inputs' architectures (config.json ``architectures`` and ``model_type``, as mergekit compares
them; ``allow_crimes`` lets them differ, as mergekit's ``--allow-crimes``), their vocabulary
sizes, and tensors that cannot be merged (not floating point) yet differ between inputs. The
request's parameters and ranges (mgit.merge.params) and each tensor's shape and dtype across
inputs (mgit.merge.plan) are checked where they are resolved, before this.

:class:`MergeCheck` is what ``mgit merge --check`` reports once everything passed.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError
from mgit.graph.objects import Graph
from mgit.graph.snapshot import Snapshot
from mgit.merge.config_keys import reference
from mgit.merge.params import Scope
from mgit.model.dtypes import lookup

if TYPE_CHECKING:
    from mgit.merge.methods.base import MergeMethod
    from mgit.merge.plan import MergePlan
    from mgit.merge.record import PlannedMerge


@dataclass(frozen=True)
class Input:
    """One model of a merge as the pre-flight sees it: its role and name, and its config.json."""

    role: str  # "the base" (or, for a method without one, "the reference") or "expert"
    name: str  # as given: a revision or a path
    config: Mapping[str, Any] | None  # its config.json, None where it has none (or not JSON)

    @property
    def label(self) -> str:
        return f"{self.role} {self.name}"


def read_config(graph: Graph, snap: Snapshot, model_dir: str) -> dict[str, Any] | None:
    """A model directory's config.json as a mapping; None where there is none or it is no JSON object."""
    entry = snap.get(posixpath.join(model_dir, "config.json") if model_dir else "config.json")
    if entry is None or entry.kind != "blob":
        return None
    try:
        doc = json.loads(graph.blob(entry.oid))
    except (ValueError, RecursionError):
        return None
    return doc if isinstance(doc, dict) else None


def check_expert_count(method: MergeMethod, names: Sequence[str]) -> None:
    """The method takes this many experts (counted without the base), as the engine would
    refuse at the first tensor."""
    count = len(names)
    expected = method.experts_expected(count)
    if expected is None:
        return
    given = f": {', '.join(names)}" if names else ""
    raise BadInputError(f"{method.name} merges {expected} expert(s) besides the base; {count} given{given}")


def check_dtype(name: str | None, option: str) -> None:
    """A working or output dtype is a floating safetensors dtype name."""
    if name is None:
        return
    dtype = lookup(name)
    if dtype is None or not dtype.mergeable:
        raise BadInputError(f"{option} {name!r} is not a floating-point dtype (F16, BF16, F32, F64)")


def _architecture(config: Mapping[str, Any]) -> tuple[Any, Any] | None:
    arch, kind = config.get("architectures"), config.get("model_type")
    return None if arch is None and kind is None else (arch, kind)


def _vocab_size(config: Mapping[str, Any]) -> Any:
    text = config.get("text_config")
    nested = text.get("vocab_size") if isinstance(text, dict) else None
    return config.get("vocab_size", nested)


def check_configs(inputs: Sequence[Input], allow_crimes: bool, vocabularies_merged: bool = False) -> None:
    """Every input's config.json against the first's (the base, or the reference): the same
    architecture unless ``allow_crimes``, the same vocabulary size unless a tokenizer merge
    builds one vocabulary of them (``vocabularies_merged``). An input without a config (or
    without the key) is not compared."""
    first = inputs[0]
    if first.config is None:
        return
    arch, vocab = _architecture(first.config), _vocab_size(first.config)
    for other in inputs[1:]:
        if other.config is None:
            continue
        theirs = _architecture(other.config)
        if not allow_crimes and arch is not None and theirs is not None and theirs != arch:
            raise BadInputError(
                f"{other.label}: config.json architecture {_shown(theirs)} differs from {first.label}'s "
                f"{_shown(arch)}; --allow-crimes merges them anyway (as mergekit's)"
            )
        size = _vocab_size(other.config)
        if not vocabularies_merged and vocab is not None and size is not None and size != vocab:
            raise BadInputError(
                f"{other.label}: config.json vocab_size {size} differs from {first.label}'s {vocab}; "
                "merging different vocabularies needs `tokenizer_source:` or `tokenizer:` in a merge config"
            )


def _shown(arch: tuple[Any, Any]) -> str:
    names, kind = arch
    listed = ",".join(map(str, names)) if isinstance(names, list) else str(names)
    return f"{listed} ({kind})"


def check_unmergeable(plan: MergePlan, labels: Sequence[str]) -> None:
    """A tensor that is not floating point (token ids, masks) is copied from the base: refused
    here when an expert's differs, as the engine would refuse when it reached it."""
    for tp in plan.tensors:
        dtype = lookup(tp.base.dtype)
        if dtype is not None and dtype.mergeable:
            continue
        differing = [labels[k] for k, reads in enumerate(tp.reads) if reads]
        if differing:
            raise BadInputError(
                f"{differing[0]}: tensor {tp.name!r} ({tp.base.dtype}) differs from the base's; "
                "only floating-point tensors are merged"
            )


def preflight_sources(
    donor: Input, sources: Sequence[Input], dtypes: tuple[str | None, str | None], allow_crimes: bool
) -> None:
    """A ``slices:`` merge's pre-flight: its dtypes, and every source model's config.json against
    the donor's (layer ranges, parameters and shapes are checked where the slices are resolved)."""
    check_dtype(dtypes[0], "dtype")
    check_dtype(dtypes[1], "out_dtype")
    check_configs([donor, *sources], allow_crimes)


def preflight(
    method: MergeMethod,
    plan: MergePlan,
    base: Input,
    experts: Sequence[Input],
    dtypes: tuple[str | None, str | None],
    allow_crimes: bool,
    vocabularies_merged: bool = False,
) -> None:
    """Everything checked before a tensor is read (see the module's docstring); one line naming
    the first input and tensor or key that fails. ``vocabularies_merged``: a tokenizer merge
    aligned the inputs' embedding rows to one vocabulary (their vocab_size may differ)."""
    check_expert_count(method, [e.name for e in experts])
    check_dtype(dtypes[0], "dtype")
    check_dtype(dtypes[1], "out_dtype")
    check_configs([base, *experts], allow_crimes, vocabularies_merged)
    check_unmergeable(plan, [e.label for e in experts])


# -- what `mgit merge --check` reports --------------------------------------------------------


@dataclass(frozen=True)
class CheckedInput:
    """One input of a checked merge: as named, the commit it resolved to, its parameters."""

    role: str  # "base" (only where the method merges it) or "expert"
    name: str
    commit: str
    parameters: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class MergeCheck:
    """A merge that passed its pre-flight: what it would merge and read (``Repository.merge_check``)."""

    method: str
    model: str  # the model directory
    inputs: list[CheckedInput]
    parameters: dict[str, Any]  # the method's global parameters
    tensors: int
    files: int
    base_bytes: int  # stored bytes a full merge reads of the base
    expert_bytes: int  # and of the experts (each differing chunk, as often as the method reads it)
    seed: int
    reference: str | None = None  # a merge without a base: the commit whose model is the reference (the first expert's)
    config: str | None = None  # the mergekit YAML file, when one was given

    @classmethod
    def of(cls, planned: PlannedMerge) -> MergeCheck:
        plan, setup = planned.plan, planned.setup
        method, request = setup.method, setup.request
        per_expert = [p.name for p in method.params if p.scope is Scope.EXPERT]  # in the method's order
        given = _as_given(setup.config, setup.expert_names, per_expert) if setup.config is not None else None
        inputs = [CheckedInput("base", setup.base_ref or "HEAD", setup.base_commit)] if setup.merges_base else []
        for k, (name, commit) in enumerate(zip(setup.expert_names, setup.expert_commits, strict=True)):
            own = given[k] if given is not None else {n: setup.params[n][k] for n in per_expert if n in setup.params}
            inputs.append(CheckedInput("expert", name, commit, own))
        top = (setup.config.get("parameters") or {}) if setup.config is not None else setup.params
        return cls(
            method=method.name,
            model=plan.model,
            inputs=inputs,
            parameters={n: v for n, v in top.items() if n not in per_expert},
            tensors=len(plan.tensors),
            files=len(plan.files),
            base_bytes=plan.base_bytes,
            expert_bytes=plan.expert_bytes,
            seed=setup.seed,
            reference=setup.reference,
            config=str(request.config) if request.config is not None else None,
        )


def _as_given(source: Mapping[str, Any], names: Sequence[str], per_expert: list[str]) -> list[dict[str, Any]]:
    """Each expert's parameters as the config writes them (its own over the config's), the
    experts matched to the config's models by name, in order."""
    shared = {n: v for n, v in (source.get("parameters") or {}).items() if n in per_expert}
    entries = [e if isinstance(e, dict) else {"model": e} for e in source.get("models") or []]
    out = []
    for name in names:
        match = next((e for e in entries if reference(e.get("model")) == name), {})
        if match:
            entries.remove(match)
        out.append(shared | dict(match.get("parameters") or {}))
    return out
