"""mergekit YAML configs: which models, which method, and parameters that may vary by
tensor (filters) and by layer (gradients).

A parameter setting is a scalar; a list of scalars (a gradient: numeric endpoints are
interpolated linearly over the layers, other values are picked by position); or a list
of ``{filter, value}`` conditions, the first whose filter is a substring of the tensor
name (or is ``*`` or absent) applying. A tensor of layer i out of N layers sits at
t = i / (N - 1); tensors outside the layers (embeddings, final norm, head) at t = 0 — the
rules mergekit applies, so a config means the same thing to both tools.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mgit.errors import BadInputError, UnknownParameterError
from mgit.merge.config_keys import reference, refuse_keys
from mgit.merge.params import Scope, check_value
from mgit.merge.slices import OutputSlice, parse_slices
from mgit.merge.vocab import TokenizerSpec, parse_spec
from mgit.model.layers import layer_of

if TYPE_CHECKING:
    from mgit.merge.methods.base import MergeMethod

DTYPES = {
    "float32": "F32",
    "fp32": "F32",
    "float16": "F16",
    "fp16": "F16",
    "half": "F16",
    "bfloat16": "BF16",
    "bf16": "BF16",
    "float64": "F64",
}
Setting = Any  # scalar | list[scalar] | list[{"filter", "value"}] | {"filter", "value"}


@dataclass(frozen=True)
class ModelEntry:
    ref: str  # a revision of this repository, or a path to a model directory
    parameters: dict[str, Setting] = field(default_factory=dict)


@dataclass(frozen=True)
class MergeConfig:
    method: str
    base: str | None
    models: list[ModelEntry]
    parameters: dict[str, Setting]
    dtype: str | None
    out_dtype: str | None
    source: dict[str, Any]  # the config as read, recorded in the plan
    tokenizer: TokenizerSpec | None = None  # tokenizer_source / tokenizer: / chat_template (mgit.merge.vocab)
    slices: tuple[OutputSlice, ...] | None = None  # a `slices:` config (then `models` is empty)
    module_parameters: dict[str, Setting] = field(default_factory=dict)  # `modules: {default: {parameters}}`

    @property
    def first_model(self) -> str:
        """The first model the config names (a merge without a base takes its files)."""
        return self.slices[0].sources[0].model if self.slices else self.models[0].ref

    def parameter_scopes(self) -> list[tuple[str, dict[str, Setting]]]:
        """Every place the config sets parameters, labelled as errors name it."""
        scopes = [("parameters", self.parameters), ("modules.default.parameters", self.module_parameters)]
        scopes += [(f"models[{i}] ({m.ref})", m.parameters) for i, m in enumerate(self.models)]
        for s, piece in enumerate(self.slices or ()):
            scopes.append((f"slices[{s}]", piece.parameters))
            scopes += [(f"slices[{s}].sources[{i}]", x.parameters) for i, x in enumerate(piece.sources)]
        return scopes


def _dtype(value: Any, key: str, where: str) -> str | None:
    if value is None:
        return None
    name = DTYPES.get(str(value).lower())
    if name is None:
        raise BadInputError(f"{where}: {key} {value!r} is not one of {', '.join(sorted(DTYPES))}")
    return name


def load_config(path: str | os.PathLike[str]) -> MergeConfig:
    where = str(path)
    try:
        doc = yaml.safe_load(Path(path).read_text("utf-8"))
    except OSError as exc:
        raise BadInputError(f"cannot read merge config {where}: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise BadInputError(f"{where} is not valid YAML: {str(exc).splitlines()[0]}") from None
    return parse_config(doc, where)


def parse_config(doc: Any, where: str) -> MergeConfig:  # noqa: C901 (one check per refused form of a mergekit YAML)
    """A config read (``doc``: the YAML as loaded; ``where``: how messages name it): also a plan
    record's ``config``, read again by ``merge --verify``."""
    if not isinstance(doc, dict):
        raise BadInputError(f"{where}: a merge config is a YAML mapping")
    refuse_keys(doc, where)  # every key honoured, or refused by name (mgit.merge.config_keys)
    slices, module = module_slices(doc.get("modules"), where)
    method = doc.get("merge_method")
    if not isinstance(method, str):
        raise BadInputError(f"{where}: merge_method is required")
    models = []
    for i, entry in enumerate(doc.get("models") or []):
        if isinstance(entry, str):
            entry = {"model": entry}
        if isinstance(entry, dict):
            entry = entry | {"model": reference(entry.get("model"))}
        if not isinstance(entry, dict) or not isinstance(entry.get("model"), str):
            raise BadInputError(f"{where}: models[{i}] needs a `model:` (a revision or a path)")
        params = entry.get("parameters") or {}
        if not isinstance(params, dict):
            raise BadInputError(f"{where}: models[{i}].parameters must be a mapping")
        models.append(ModelEntry(entry["model"], params))
    if doc.get("slices") is not None:
        if slices is not None:
            raise BadInputError(f"{where}: give either `slices:` or `modules:`, not both")
        slices = parse_slices(doc["slices"], where)
    if slices is not None and models:
        raise BadInputError(f"{where}: give either `models:` or `slices:`, not both")
    if not models and slices is None:
        raise BadInputError(f"{where}: `models:` lists no model")
    params = doc.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadInputError(f"{where}: parameters must be a mapping")
    base = reference(doc.get("base_model"))
    if base is not None and not isinstance(base, str):
        raise BadInputError(f"{where}: base_model must be a revision or a path")
    cfg = MergeConfig(
        method,
        base,
        models,
        params,
        _dtype(doc.get("dtype"), "dtype", where),
        _dtype(doc.get("out_dtype"), "out_dtype", where),
        doc,
        parse_spec(doc, where),
        slices,
        module,
    )
    check_ranges(cfg, where)
    return cfg


def module_slices(doc: Any, where: str) -> tuple[tuple[OutputSlice, ...] | None, dict[str, Setting]]:
    """A ``modules:`` config's slices and module parameters. mergekit names the one module of a
    text model ``default`` (its ``slices:`` are that module's); models of several modules (a
    vision tower beside the decoder) are refused, as are a module's ``models:`` (use ``models:``)."""
    if doc is None:
        return None, {}
    if not isinstance(doc, dict) or set(doc) != {"default"}:
        named = ", ".join(map(str, doc)) if isinstance(doc, dict) else repr(doc)
        raise BadInputError(f"{where}: `modules:` supports the one module `default` of a text model (got {named})")
    module = doc["default"]
    if not isinstance(module, dict) or module.get("models") is not None or module.get("slices") is None:
        raise BadInputError(f"{where}: modules.default needs `slices:` (for `models:`, give them at the top level)")
    extra = sorted(set(module) - {"slices", "parameters", "models"})
    if extra:
        raise BadInputError(f"{where}: modules.default: unsupported key(s) {', '.join(extra)}")
    params = module.get("parameters") or {}
    if not isinstance(params, dict):
        raise BadInputError(f"{where}: modules.default.parameters must be a mapping")
    return parse_slices(module["slices"], f"{where}: modules.default"), params


def setting_values(setting: Setting) -> list[Any]:
    """Every value a setting can take: interpolation stays between a gradient's endpoints,
    so checking these checks every tensor's value against an interval."""
    if isinstance(setting, dict):
        return setting_values(setting.get("value"))
    if isinstance(setting, list):
        return [v for item in setting for v in setting_values(item)]
    return [] if setting is None else [setting]


def check_ranges(cfg: MergeConfig, where: str) -> None:
    """Every parameter value of the config within its accepted range (mgit.merge.params),
    and the method's conditions joining several, before any model is resolved or read (an
    unknown method is reported by the caller, with its list of known ones)."""
    from mgit.merge.methods.registry import METHODS

    method = METHODS.get(cfg.method)
    scopes = cfg.parameter_scopes()
    own = method.own_ranges() if method is not None else {}
    for label, params in scopes:
        for name, setting in params.items():
            check_value(name, setting_values(setting), f"{where}: {label}", own.get(name))
        density, epsilon = params.get("density"), params.get("epsilon")
        if method is not None and isinstance(density, int | float) and isinstance(epsilon, int | float):
            pair = {"density": density, "epsilon": epsilon}  # other pairs: per tensor, when resolved
            method.check_together(pair, f"{where}: {label}")


def layer_position(name: str, num_layers: int) -> float:
    """t of a tensor for gradients: i / (N - 1) in layer i; 0 outside the layers."""
    layer = layer_of(name)
    if layer is None:
        return 0.0
    return layer / (num_layers - 1) if num_layers > 1 else 1.0


def evaluate(setting: Setting, tensor: str, t: float) -> Any:
    """The value a setting takes for one tensor (None: unset for this tensor)."""
    if isinstance(setting, dict):
        setting = [setting]
    if isinstance(setting, bool | int | float | str):
        return setting
    if not isinstance(setting, list):
        raise BadInputError(f"parameter setting {setting!r} is not a number, a list or a filter list")
    if not setting:
        return None
    if all(isinstance(v, bool | int | float | str) for v in setting):
        if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in setting):
            return setting[int(t * (len(setting) - 1))]
        scaled = t * (len(setting) - 1)
        i0 = int(scaled)
        i1 = min(len(setting) - 1, i0 + 1)
        frac = scaled - i0
        return (1 - frac) * setting[i0] + frac * setting[i1]
    for cond in setting:
        if not isinstance(cond, dict) or "value" not in cond:
            raise BadInputError(f"parameter condition {cond!r} needs a `value:`")
        pattern = cond.get("filter")
        if pattern is None or pattern == "*" or (tensor and pattern in tensor):
            return evaluate(cond["value"], tensor, t)
    return None


def num_layers(names: list[str]) -> int:
    """Layers of a model, from its tensor names (highest layer index + 1)."""
    layers = [layer_of(n) for n in names]
    found = [n for n in layers if n is not None]
    return max(found) + 1 if found else 0


def tensor_parameters(method: MergeMethod, cfg: MergeConfig, entries: list[ModelEntry], layers: int):
    """tensor name → that tensor's parameters (filters and gradients evaluated).

    An expert parameter comes from the model's own ``parameters``, else the config's;
    a global one from the config's ``parameters``.
    """
    known = {p.name for p in method.params}
    given = set(cfg.parameters) | {k for m in entries for k in m.parameters}
    unknown = sorted(given - known)
    if unknown:
        raise UnknownParameterError(
            f"{method.name}: unknown parameter(s) {', '.join(unknown)} (accepted: {', '.join(sorted(known))})"
        )

    def params_for(name: str) -> dict[str, Any]:
        t = layer_position(name, layers)
        out: dict[str, Any] = {}
        for p in method.params:
            if p.scope is Scope.GLOBAL:
                setting = cfg.parameters.get(p.name)
                value = None if setting is None else evaluate(setting, name, t)
                if value is not None:
                    out[p.name] = value
                continue
            values = []
            for m in entries:
                setting = m.parameters.get(p.name, cfg.parameters.get(p.name))
                values.append(None if setting is None else evaluate(setting, name, t))
            if all(v is None for v in values):
                continue
            if any(v is None for v in values):
                if p.required:
                    missing = [m.ref for m, v in zip(entries, values, strict=True) if v is None]
                    raise BadInputError(f"{p.name} is not set for {', '.join(missing)} (tensor {name!r})")
                values = [p.default if v is None else v for v in values]
            out[p.name] = values
        return out

    return params_for
