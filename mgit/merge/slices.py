"""mergekit's ``slices:`` configs resolved into output tensors, from tensor names alone (pure,
torch-free: a bad layer range is refused before any tensor is read).

An output model is assembled from slices; each slice merges the same number of layers from
each of its sources (``model`` with ``layer_range: [a, b)``), and the slices' layers follow one
another in the output, renumbered from 0. As mergekit plans it (its ``plan.py``):

- a layer tensor of output layer ``n`` (the ``i``-th of its slice of ``L`` layers) is merged
  from each source's tensor of the same kind at layer ``a + i``; gradients see
  ``t = i / (L - 1)`` (1 in a one-layer slice);
- the tensors before the layers (embeddings) are merged from the first slice's sources with
  its parameters, those after them (final norm, head) from the last slice's sources (as many
  as the first slice has), at ``t = 0``;
- a parameter comes from the first of: the slice's source for that model, the slice, the
  module (``modules:``), the config's ``parameters`` (mgit.merge.slice_params).

Which tensors are "before" the layers is told by name (embeddings: ``embed``, ``wte``,
``wpe``, ``word_embeddings``, ``tok_embeddings``), since mgit knows no architecture tables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from mgit.errors import BadInputError
from mgit.model.layers import layer_of

Setting = Any  # as mgit.merge.config's
_LAYER = re.compile(r"((?:^|\.)(?:layers?|h|blocks?|block)\.)(\d+)(?=\.|$)")
_BEFORE_LAYERS = re.compile(r"embed|(?:^|\.)wte\.|(?:^|\.)wpe\.|word_embeddings|tok_embeddings")
# The config key of the layer count (mergekit's num_layers_config_key), the first one present.
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
CONFIG_DTYPES = {"BF16": "bfloat16", "F16": "float16", "F32": "float32", "F64": "float64"}


@dataclass(frozen=True)
class SliceSource:
    """One source of an output slice: ``model``'s layers ``start`` to ``end`` (exclusive)."""

    model: str  # a revision or a path, as the config names it
    start: int
    end: int
    parameters: dict[str, Setting] = field(default_factory=dict)


@dataclass(frozen=True)
class OutputSlice:
    sources: tuple[SliceSource, ...]
    base: str | None = None  # the slice's own base_model (else the config's)
    parameters: dict[str, Setting] = field(default_factory=dict)

    @property
    def layers(self) -> int:
        return self.sources[0].end - self.sources[0].start


@dataclass(frozen=True)
class TensorSource:
    """Where one input of an output tensor is read: a model (as the config names it) and the
    name of its tensor there."""

    model: str
    tensor: str


@dataclass(frozen=True)
class OutputTensor:
    """One tensor of the assembled model: its name, its inputs in the slice's order, which of
    them is the base (None: none is), the output slice whose parameters apply, and t."""

    name: str
    sources: tuple[TensorSource, ...]
    base: int | None
    slice: int
    t: float


def parse_slices(doc: Any, where: str) -> tuple[OutputSlice, ...]:  # noqa: C901 (one check per refused form)
    """The ``slices:`` list of a config, each range checked on its own (non-negative, not empty,
    the same length in every source of a slice), as mergekit refuses them."""
    if not isinstance(doc, list) or not doc:
        raise BadInputError(f"{where}: `slices:` is a list of output slices")
    out = []
    for s, item in enumerate(doc):
        at = f"{where}: slices[{s}]"
        if not isinstance(item, dict) or not isinstance(item.get("sources"), list) or not item["sources"]:
            raise BadInputError(f"{at} needs `sources:` (a list of model and layer_range)")
        unknown = sorted(set(item) - {"sources", "base_model", "parameters", "residual_weight"})
        if unknown or item.get("residual_weight") is not None:
            raise BadInputError(f"{at}: unsupported key(s) {', '.join(unknown or ['residual_weight'])}")
        sources = []
        for i, src in enumerate(item["sources"]):
            here = f"{at}.sources[{i}]"
            if not isinstance(src, dict) or not isinstance(src.get("model"), str):
                raise BadInputError(f"{here} needs a `model:` (a revision or a path)")
            extra = sorted(set(src) - {"model", "layer_range", "parameters"})
            if extra:
                raise BadInputError(f"{here}: unsupported key(s) {', '.join(extra)}")
            bounds = src.get("layer_range")
            if not (isinstance(bounds, list) and len(bounds) == 2 and all(type(b) is int for b in bounds)):
                raise BadInputError(f"{here}: layer_range must be [start, end], two integers")
            start, end = bounds
            if start < 0 or end <= start:
                raise BadInputError(f"{here}: layer_range [{start}, {end}] is empty or negative")
            sources.append(SliceSource(src["model"], start, end, _mapping(src.get("parameters"), here)))
        lengths = {x.end - x.start for x in sources}
        if len(lengths) > 1:
            raise BadInputError(f"{at}: every source of a slice must span the same number of layers")
        base = item.get("base_model")
        if base is not None and not isinstance(base, str):
            raise BadInputError(f"{at}: base_model must be a revision or a path")
        out.append(OutputSlice(tuple(sources), base, _mapping(item.get("parameters"), at)))
    return tuple(out)


def _mapping(value: Any, where: str) -> dict[str, Setting]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise BadInputError(f"{where}: parameters must be a mapping")
    return value


def models_of(slices: Sequence[OutputSlice]) -> list[str]:
    """Every model the slices read, in order of first appearance."""
    return list(dict.fromkeys(src.model for s in slices for src in s.sources))


def num_layers(names: Sequence[str]) -> int:
    """Layers of a model, from its tensor names (highest layer index + 1)."""
    found = [n for n in map(layer_of, names) if n is not None]
    return max(found) + 1 if found else 0


def renumbered(name: str, index: int) -> str:
    """``name`` with its layer index replaced by ``index``."""
    return _LAYER.sub(lambda m: f"{m.group(1)}{index}", name, count=1)


def check_ranges(slices: Sequence[OutputSlice], names: Mapping[str, Sequence[str]], where: str = "") -> None:
    """Every source's layers within its model's (one line, naming the first range beyond;
    ``where``: the config's name, leading the message)."""
    for s, out in enumerate(slices):
        for i, src in enumerate(out.sources):
            have = num_layers(names[src.model])
            if src.end > have:
                raise BadInputError(
                    f"{where}slices[{s}].sources[{i}]: layer_range [{src.start}, {src.end}] goes beyond "
                    f"{src.model}'s {have} layers"
                )


def output_tensors(
    slices: Sequence[OutputSlice], names: Mapping[str, Sequence[str]], base: str | None, where: str = ""
) -> list[OutputTensor]:
    """Every output tensor, in mergekit's order (before the layers, the layers, after them);
    ``names``: each model's tensor names; ``base``: the config's base_model; ``where``: the
    config's name, leading a message."""
    check_ranges(slices, names, where)
    held = {model: set(listed) for model, listed in names.items()}
    layered: dict[tuple[str, int], list[str]] = {}  # (model, layer) → its tensors, in order
    for model, listed in names.items():
        for n in listed:
            layer = layer_of(n)
            if layer is not None:
                layered.setdefault((model, layer), []).append(n)
    first, last = slices[0], slices[-1]
    outside = [n for n in names[first.sources[0].model] if layer_of(n) is None]
    before = [n for n in outside if _BEFORE_LAYERS.search(n)]
    after = [n for n in outside if not _BEFORE_LAYERS.search(n)]
    out = [_outside(n, first, 0, base) for n in before]
    index = 0
    for s, piece in enumerate(slices):
        lead = piece.sources[0]
        for i in range(piece.layers):
            t = i / (piece.layers - 1) if piece.layers > 1 else 1.0
            for name in layered.get((lead.model, lead.start + i), []):
                srcs = tuple(TensorSource(x.model, renumbered(name, x.start + i)) for x in piece.sources)
                for x in srcs:
                    if x.tensor not in held[x.model]:
                        raise BadInputError(f"{where}slices[{s}]: {x.model} lacks tensor {x.tensor!r}")
                out.append(OutputTensor(renumbered(name, index), srcs, _base_index(srcs, piece, base), s, t))
            index += 1
    width = len(first.sources)  # mergekit pairs the last slice's sources with the first's count
    tail = OutputSlice(last.sources[:width], last.base, last.parameters)
    out += [_outside(n, tail, len(slices) - 1, base) for n in after]
    return [o for o in out if all(x.tensor in held[x.model] for x in o.sources)]  # an absent lm_head: tied


def _outside(name: str, piece: OutputSlice, s: int, base: str | None) -> OutputTensor:
    srcs = tuple(TensorSource(x.model, name) for x in piece.sources)
    return OutputTensor(name, srcs, _base_index(srcs, piece, base), s, 0.0)


def _base_index(srcs: Sequence[TensorSource], piece: OutputSlice, base: str | None) -> int | None:
    model = piece.base or base
    return next((k for k, x in enumerate(srcs) if x.model == model), None)


def output_layers(slices: Sequence[OutputSlice]) -> int:
    return sum(s.layers for s in slices)


def rewritten_config(
    donor: Mapping[str, Any], layers: int, dtype: str | None, layer_types: Sequence[Any] | None = None
) -> dict[str, Any]:
    """The output model's config.json, as mergekit makes it: the donor's (the base model's, else
    the first source's) with its layer count set and, given ``dtype`` (a safetensors name), its
    dtype. ``layer_types`` (per output layer, from its source): a per-layer list of that name
    rewritten too, which mergekit leaves stale (transformers then refuses the config)."""
    doc = dict(donor)
    key = next((k for k in LAYER_KEYS if k in doc), None)
    if key is None:
        raise BadInputError(f"the model's config.json has no layer count ({', '.join(LAYER_KEYS)})")
    doc[key] = layers
    if dtype is not None:
        doc.pop("torch_dtype", None)
        doc["dtype"] = CONFIG_DTYPES.get(dtype, dtype)
    if layer_types is not None and isinstance(doc.get("layer_types"), list):
        doc["layer_types"] = list(layer_types)
    return doc


def output_files(donor: Mapping[str, Sequence[str]], outputs: Sequence[str]) -> dict[str, list[str]]:
    """Output file → its tensors, in the donor's file names (the base model's, else the first
    source's): a tensor goes to the donor's file holding a tensor of its name; a layer past the
    donor's last goes where the donor's last layer's tensor of its kind lives (the last shards,
    where a state dict committed from memory adds its new tensors, mgit.model.shards); anything
    else to the donor's last file. So the merged model keeps the shard names and index its
    loaders know, and an unchanged layer lands where the donor had it. Files left without a
    tensor are not in the result (the merge drops them)."""
    where = {n: f for f, ns in donor.items() for n in ns}
    last_layer, last_file = num_layers(list(where)) - 1, list(donor)[-1]
    files: dict[str, list[str]] = {f: [] for f in donor}
    for name in outputs:
        file = where.get(name)
        if file is None and layer_of(name) is not None:
            file = where.get(renumbered(name, last_layer))
        files[file or last_file].append(name)
    return {f: ns for f, ns in files.items() if ns}


def output_layer_sources(slices: Sequence[OutputSlice]) -> list[tuple[str, int]]:
    """Per output layer: (model, layer) of its slice's first source."""
    return [(s.sources[0].model, s.sources[0].start + i) for s in slices for i in range(s.layers)]
