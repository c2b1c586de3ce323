"""LoRA adapters (PEFT's format) applied to a model before it is merged: what mergekit does for
a ``MODEL+LORA`` input (PEFT's ``merge_and_unload``), as pure functions of the adapter's config,
its tensors and the model's weights.

Each targeted Linear weight W (out × in) becomes W + s·(B·A), A (r × in), B (out × r), with
s = alpha / r, or alpha / √r under ``use_rslora`` (r and alpha per module where
``rank_pattern`` / ``alpha_pattern`` name it). PEFT computes B·A·s in float32 (it upcasts
half-precision adapters) and adds it to W in the promoted dtype, rounding once to W's dtype;
so does :func:`applied`. A tensor the adapter saves whole (``modules_to_save``, a trained
``bias``) replaces the model's, cast to its dtype. Whatever else an adapter may ask for (DoRA,
Conv1D's ``fan_in_fan_out``, embedding or convolution targets, a LoRA bias, ...) is refused by
name: applied differently, it would be a different model.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError

if TYPE_CHECKING:
    import torch

PREFIX = "base_model.model."  # every tensor name PEFT saves for a model it wrapped
CONFIG_FILE = "adapter_config.json"
WEIGHTS_FILE = "adapter_model.safetensors"

# adapter_config keys that change how the adapter applies, and what each is, for the refusal
_REFUSED = {
    "use_dora": "DoRA (use_dora)",
    "fan_in_fan_out": "fan_in_fan_out (Conv1D targets)",
    "lora_bias": "a LoRA bias (lora_bias)",
    "layer_replication": "layer_replication",
    "target_parameters": "target_parameters (parameter targets)",
    "trainable_token_indices": "trainable tokens (trainable_token_indices)",
    "alora_invocation_tokens": "aLoRA (alora_invocation_tokens)",
    "arrow_config": "Arrow (arrow_config)",
    "use_bdlora": "BD-LoRA (use_bdlora)",
    "velora_config": "VeLoRA (velora_config)",
    "monteclora_config": "MonteCLoRA (monteclora_config)",
    "mica": "MiCA (mica)",
    "kasa_config": "KaSA (kasa_config)",
    "use_qalora": "QA-LoRA (use_qalora)",
}


@dataclass(frozen=True)
class LoraTarget:
    """One Linear weight the adapter changes: the model's tensor, the adapter's A and B, and s."""

    weight: str
    a: str
    b: str
    scaling: float


@dataclass(frozen=True)
class AdapterPlan:
    """What an adapter does to a model: its low-rank updates and its whole-tensor copies
    (model tensor → adapter tensor)."""

    targets: list[LoraTarget]
    copies: dict[str, str]

    @property
    def changed(self) -> list[str]:
        """The model tensors the adapter changes, in name order."""
        return sorted([t.weight for t in self.targets] + list(self.copies))


def check_config(config: Any, where: str) -> None:
    """Refuse, in one line, an adapter config this module would not apply as PEFT does."""
    if not isinstance(config, dict):
        raise BadInputError(f"{where}: {CONFIG_FILE} is not a JSON object")
    kind = config.get("peft_type", "LORA")
    if kind != "LORA":
        raise BadInputError(f"{where}: a {kind} adapter; only LoRA adapters can be applied")
    asked = [label for key, label in _REFUSED.items() if config.get(key)]
    if asked:
        raise BadInputError(f"{where}: {', '.join(asked)} not supported; only plain LoRA on Linear layers is applied")
    for key in ("r", "lora_alpha"):
        value = config.get(key)
        if not _positive(value):
            raise BadInputError(f"{where}: {CONFIG_FILE} needs a positive {key}, not {value!r}")


def _positive(value: Any) -> bool:
    return not isinstance(value, bool) and isinstance(value, int | float) and value > 0


def _pattern_value(patterns: Mapping[str, Any], module: str, default: Any) -> Any:
    """PEFT's per-module override (peft.utils.other.get_pattern_key): the first key that
    matches the end of the module's name, after a dot, as a regular expression."""
    for key in patterns:
        try:
            if re.match(rf"(.*\.)?({key})$", module):
                return patterns[key]
        except re.error as exc:
            raise BadInputError(f"pattern {key!r} of the adapter config is not a regular expression: {exc}") from None
    return default


def scaling(config: Mapping[str, Any], module: str) -> tuple[int, float]:
    """A module's rank and its update's scale s: alpha / r, or alpha / √r with use_rslora."""
    r = _pattern_value(config.get("rank_pattern") or {}, module, config["r"])
    alpha = _pattern_value(config.get("alpha_pattern") or {}, module, config["lora_alpha"])
    if not (_positive(r) and _positive(alpha)):
        raise BadInputError(f"{module}: rank {r!r} and alpha {alpha!r} must be positive numbers")
    return r, alpha / math.sqrt(r) if config.get("use_rslora") else alpha / r


def plan_adapter(
    config: Mapping[str, Any],
    adapter: Mapping[str, tuple[int, ...]],
    model: Mapping[str, tuple[int, ...]],
    where: str,
) -> AdapterPlan:
    """Which model tensor each adapter tensor (name → shape) changes, and how; the model is
    name → shape. Refuses an adapter tensor of another kind, one the model lacks or whose
    shape does not fit, a lone A or B."""
    pairs: dict[str, dict[str, str]] = {}
    copies: dict[str, str] = {}
    for name in sorted(adapter):
        if not name.startswith(PREFIX):
            raise BadInputError(f"{where}: tensor {name!r} is not a PEFT adapter's (no {PREFIX!r} prefix)")
        rest = name[len(PREFIX) :]
        found = re.fullmatch(r"(.+)\.lora_([AB])\.weight", rest)
        if found:
            pairs.setdefault(found[1], {})[found[2]] = name
        elif re.search(r"(^|\.)lora_embedding_[AB](\.|$)", rest):
            raise BadInputError(f"{where}: {name!r} adapts an embedding; only Linear targets are supported")
        elif re.search(r"(^|\.)lora_", rest):
            raise BadInputError(f"{where}: {name!r} is not a plain LoRA tensor (DoRA and variants are not supported)")
        else:
            copies[rest.replace(".base_layer.", ".")] = name
    targets = [_target(config, module, ab, adapter, model, where) for module, ab in pairs.items()]
    for weight, name in copies.items():
        if weight not in model:
            raise BadInputError(f"{where}: the model has no tensor {weight!r} (saved whole by the adapter)")
        if model[weight] != adapter[name]:
            raise BadInputError(f"{where}: {name!r} is {adapter[name]}, the model's {weight!r} {model[weight]}")
    return AdapterPlan(targets, copies)


def _target(
    config: Mapping[str, Any],
    module: str,
    ab: dict[str, str],
    adapter: Mapping[str, tuple[int, ...]],
    model: Mapping[str, tuple[int, ...]],
    where: str,
) -> LoraTarget:
    if set(ab) != {"A", "B"}:
        raise BadInputError(f"{where}: {module} has lora_{''.join(ab)} without its pair")
    a, b, weight = adapter[ab["A"]], adapter[ab["B"]], f"{module}.weight"
    if weight not in model:
        raise BadInputError(f"{where}: the model has no tensor {weight!r} for the adapter's {module}")
    if len(a) != 2 or len(b) != 2 or len(model[weight]) != 2:
        raise BadInputError(f"{where}: {module} is not a Linear layer; only Linear targets are supported")
    r, s = scaling(config, module)
    if a[0] != r or b[1] != r or model[weight] != (b[0], a[1]):
        raise BadInputError(
            f"{where}: {module}'s A {a} and B {b} do not fit rank {r} and the model's weight {model[weight]}"
        )
    return LoraTarget(weight, ab["A"], ab["B"], s)


def applied(weight: torch.Tensor, a: torch.Tensor, b: torch.Tensor, s: float) -> torch.Tensor:
    """W + s·(B·A) as PEFT merges it: B·A·s in float32, added in the promoted dtype, rounded
    once to W's dtype."""
    delta = (b.float() @ a.float()) * s
    return (weight + delta).to(weight.dtype)


def apply_adapter(
    plan: AdapterPlan, weights: Mapping[str, torch.Tensor], adapter: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The changed tensors (``plan.changed``) of the model whose tensors are ``weights``."""
    out = {t.weight: applied(weights[t.weight], adapter[t.a], adapter[t.b], t.scaling) for t in plan.targets}
    out |= {w: adapter[name].to(weights[w].dtype) for w, name in plan.copies.items()}
    return out


@dataclass(frozen=True)
class LoraInput:
    """A ``MODEL+LORA`` merge input as resolved, for the plan record (``lora``): which adapter
    (a commit and directory of the repository, or a path, and the BLAKE3 of its two files)
    was applied to which model (commit and directory), making which commit (the one merged)."""

    name: str  # as given
    commit: str
    model: str
    model_dir: str
    adapter: dict[str, str]  # {"commit", "dir"} or {"path"}
    blake3: dict[str, str]  # CONFIG_FILE and WEIGHTS_FILE → BLAKE3 of their bytes

    def to_json(self) -> dict[str, Any]:
        return {
            "input": self.name,
            "commit": self.commit,
            "model": self.model,
            "model_dir": self.model_dir,
            "adapter": self.adapter,
            "blake3": self.blake3,
        }
