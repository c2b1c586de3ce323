"""A ``slices:`` config's merge planned (mgit.merge.slices says which source tensors each output
tensor is merged from): every model the slices name resolved to a commit, their manifests read
(no tensor data), the layer ranges checked, one TensorPlan per output tensor over its own
sources, the donor's config.json and shard index rewritten for the assembled model."""

from __future__ import annotations

import json
import posixpath
from typing import TYPE_CHECKING, Any

from mgit.context import Context
from mgit.errors import BadInputError
from mgit.graph.snapshot import Snapshot
from mgit.model.dtypes import lookup
from mgit.ops import merge_inputs

if TYPE_CHECKING:
    from mgit.merge.config import MergeConfig
    from mgit.merge.lora import LoraInput
    from mgit.merge.methods.base import MergeMethod
    from mgit.merge.plan import MergePlan, TensorPlan
    from mgit.merge.record import PlannedMerge
    from mgit.merge.request import MergeRequest, MergeSetup
    from mgit.merge.slices import OutputTensor
    from mgit.model.manifest import TensorManifest


def resolve_slices(
    ctx: Context,
    request: MergeRequest,
    cfg: MergeConfig,
    chosen: MergeMethod,
    base_commit: str,
    reference: str | None,
    base_snap: Snapshot,
    model_dir: str,
    loras: list[LoraInput],
) -> PlannedMerge:
    """The plan of a ``slices:`` merge; ``base_snap`` holds the donor's model (the base's, else the
    first source's: ``reference``), whose files, config and shard names the result keeps; ``loras``
    the MODEL+LORA inputs applied so far, to which the sources' are added."""
    from mgit.merge.plan import MergePlan, model_tensors, prefetch_models
    from mgit.merge.record import PlannedMerge
    from mgit.merge.request import MergeSetup
    from mgit.merge.slice_params import inputs_of, tensor_parameters
    from mgit.merge.slices import models_of, output_files, output_tensors

    if request.wants_budget:
        raise BadInputError(f"{request.config}: a `slices:` merge takes no --budget or --explain")
    if cfg.tokenizer is not None:
        raise BadInputError(
            f"{request.config}: tokenizer keys in a `slices:` merge are not supported yet; "
            "merge the tokenizers in a `models:` merge"
        )
    assert cfg.slices is not None
    slices, where = cfg.slices, str(request.config)
    takes_base = chosen.needs_base or (chosen.base_optional and cfg.base is not None)
    commits = {ref: _commit(ctx, ref, cfg, base_commit, reference, model_dir, loras) for ref in models_of(slices)}
    snaps = {ref: ctx.snapshot(c) for ref, c in commits.items()}
    prefetch_models(ctx.graph, [base_snap, *snaps.values()], model_dir)
    parsed: dict[str, TensorManifest] = {}
    donor_files, _ = model_tensors(ctx.graph, base_snap, model_dir, parsed)
    manifests = {ref: model_tensors(ctx.graph, snap, model_dir, parsed)[1] for ref, snap in snaps.items()}
    outputs = output_tensors(slices, {ref: list(m) for ref, m in manifests.items()}, cfg.base, f"{where}: ")
    if takes_base:
        lacking = next((o for o in outputs if o.base is None), None)
        if lacking is not None:
            base = slices[lacking.slice].base or cfg.base
            raise BadInputError(
                f"{where}: {chosen.name} merges over a base: slices[{lacking.slice}] needs a source from "
                + (f"its base model {base}" if base else "a base_model (none is named)")
            )
    expert_refs = list(dict.fromkeys(o.sources[k].model for o in outputs for k in inputs_of(o, takes_base)))
    by_name = {o.name: o for o in outputs}
    params_of = tensor_parameters(chosen, slices, cfg.module_parameters, cfg.parameters, takes_base)
    tensors = {}
    for o in outputs:
        count = len(inputs_of(o, takes_base))
        chosen.check_params(chosen.resolve(params_of(o), count), f"{where}: tensor {o.name}")
        tensors[o.name] = _tensor_plan(o, manifests, commits, takes_base, ctx.store.read_cost)
    first = outputs[0]
    setup = MergeSetup(
        chosen,
        chosen.resolve(params_of(first), len(inputs_of(first, takes_base))),
        base_commit,
        [commits[r] for r in expert_refs],
        expert_refs,
        base_snap,
        base_ref=cfg.base,
        params_for=lambda name: params_of(by_name[name]),
        config=cfg.source,
        dtype=request.dtype or cfg.dtype,
        out_dtype=request.out_dtype or cfg.out_dtype,
        reference=reference,
        seed=request.seed or 0,
        request=request,
        experts_of=lambda name: len(inputs_of(by_name[name], takes_base)),
        loras=tuple(loras),
    )
    _preflight(ctx, request, cfg, setup, snaps, model_dir)
    files = output_files(donor_files, [o.name for o in outputs])
    plan = MergePlan(model_dir, files, [], expert_passes=2 if chosen.decides_per_expert else 1)
    for file, names in files.items():
        for name in names:
            tensors[name].file = file
            plan.tensors.append(tensors[name])
            plan.base_bytes += sum(tensors[name].base_costs)
    plan.rewritten = rewritten_files(ctx, cfg, setup, snaps, model_dir, plan)
    plan.dropped = tuple(f for f in donor_files if f not in files)
    return PlannedMerge(plan, setup)


def _preflight(
    ctx: Context, request: MergeRequest, cfg: MergeConfig, setup: MergeSetup, snaps: dict[str, Snapshot], model_dir: str
) -> None:
    """The sources' config.json against the donor's (architecture, vocabulary size) and the
    dtypes, before any tensor is read (mgit.merge.preflight)."""
    from mgit.merge.preflight import Input, preflight_sources, read_config

    donor = cfg.base or cfg.first_model
    first = Input(
        "the base" if cfg.base else "the reference", donor, read_config(ctx.graph, setup.base_snap, model_dir)
    )
    sources = [Input("source", ref, read_config(ctx.graph, snap, model_dir)) for ref, snap in snaps.items()]
    preflight_sources(first, sources, (setup.dtype, setup.out_dtype), request.allow_crimes)


def _commit(
    ctx: Context,
    ref: str,
    cfg: MergeConfig,
    base_commit: str,
    reference: str | None,
    model_dir: str,
    loras: list[LoraInput],
) -> str:
    """The commit a source model names (the base's and the reference's are resolved already)."""
    if ref == cfg.base:
        return base_commit
    assert cfg.slices is not None
    if reference is not None and ref == cfg.slices[0].sources[0].model:
        return reference
    return merge_inputs.merge_input(ctx, ref, model_dir, loras)


def _tensor_plan(
    o: OutputTensor,
    manifests: dict[str, dict[str, TensorManifest]],
    commits: dict[str, str],
    takes_base: bool,
    cost: Any,
) -> TensorPlan:
    """One output tensor's plan over its own sources: the base's tensor (a method without a base:
    the first source's, the reference for dtype and chunking) and each expert's."""
    from mgit.merge.plan import plan_tensor
    from mgit.merge.slice_params import inputs_of

    def ref(k: int) -> dict[str, str]:
        src = o.sources[k]
        return {"model": src.model, "commit": commits[src.model], "tensor": src.tensor}

    inputs = inputs_of(o, takes_base)
    lead = o.base if takes_base and o.base is not None else 0
    base = manifests[o.sources[lead].model][o.sources[lead].tensor]
    experts = [manifests[o.sources[k].model][o.sources[k].tensor] for k in inputs]
    labels = [f"{o.sources[k].model} ({o.sources[k].tensor})" for k in inputs]
    tp = plan_tensor("", o.name, base, experts, labels, False, cost)
    tp.sources = {"base": ref(lead) if takes_base else None, "experts": [ref(k) for k in inputs]}
    return tp


def rewritten_files(
    ctx: Context, cfg: MergeConfig, setup: MergeSetup, snaps: dict[str, Snapshot], model_dir: str, plan: MergePlan
) -> dict[str, bytes]:
    """The donor's config.json with the assembled model's layer count (and dtype, layer_types),
    and its shard index (``*.safetensors.index.json``) naming each output tensor's file."""
    from mgit.merge.slices import output_layer_sources, output_layers, rewritten_config

    assert cfg.slices is not None
    out: dict[str, bytes] = {}
    path = posixpath.join(model_dir, "config.json")
    base_snap = setup.base_snap
    donor = _json(ctx, base_snap, path)
    if donor is not None:
        types = []
        for model, layer in output_layer_sources(cfg.slices):
            listed = (_json(ctx, snaps[model], path) or {}).get("layer_types")
            types.append(listed[layer] if isinstance(listed, list) and layer < len(listed) else None)
        dtype = setup.out_dtype or setup.dtype
        doc = rewritten_config(donor, output_layers(cfg.slices), dtype, None if None in types else types)
        out[path] = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    for index in [p for p in base_snap if posixpath.dirname(p) == model_dir and p.endswith(".safetensors.index.json")]:
        doc = _json(ctx, base_snap, index) or {}
        doc["weight_map"] = {tp.name: posixpath.basename(tp.file) for tp in sorted(plan.tensors, key=lambda t: t.name)}
        if isinstance(doc.get("metadata"), dict) and "total_size" in doc["metadata"]:
            doc["metadata"]["total_size"] = sum(_output_bytes(tp.base, setup) for tp in plan.tensors)
        out[index] = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode()
    return out


def _output_bytes(base: TensorManifest, setup: MergeSetup) -> int:
    """Bytes of an output tensor: a floating one in the result dtype, others as they are."""
    given, out = lookup(base.dtype), lookup(setup.result_dtype(base.dtype))
    if given is None or out is None or not given.mergeable:
        return base.nbytes
    return base.nbytes // given.bits * out.bits


def _json(ctx: Context, snap: Snapshot, path: str) -> dict[str, Any] | None:
    """A small JSON file of a snapshot (None: absent, or not one)."""
    entry = snap.get(path)
    if entry is None or entry.kind != "blob":
        return None
    try:
        doc = json.loads(ctx.graph.blob(entry.oid))
    except ValueError:
        raise BadInputError(f"{path} is not valid JSON") from None
    return doc if isinstance(doc, dict) else None
