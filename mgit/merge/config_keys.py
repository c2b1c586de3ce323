"""Every key of a mergekit 0.1.5 config and every ``mergekit-yaml`` option, each honoured or
refused by name with one line saying why (and what to use instead): nothing a mergekit user
writes is silently ignored.

:func:`refuse_keys` (called by :func:`mgit.merge.config.load_config`) walks a config against
:data:`CONFIG_KEYS`; ``mgit merge`` names a refused ``mergekit-yaml`` option with its line from
:data:`OPTIONS`. docs/merging.md's "YAML keys" table is :func:`markdown_table`, and the tests walk
mergekit's pydantic schema and ``MergeOptions`` against both tables, so a key mergekit adds fails them.

Key paths: ``a.b`` a mapping's key, ``[]`` a list's items, ``*`` a mapping's free keys
(parameter names, module names, tokens). A key refused covers every key under it.

Work that lands on its own is a :class:`Feature`: its keys say what they do once it lands, and
until then are refused with the feature's one line. Landing one is one edit: ``lands=True``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from mgit.errors import BadInputError


@dataclass(frozen=True)
class Feature:
    """A piece of mergekit's config mgit takes on as a whole; until it ``lands``, its keys are
    refused with ``refusal``."""

    name: str
    lands: bool
    refusal: str


SLICES = Feature(
    "slices",
    True,
    "layer surgery (`slices:`/`modules:`) is not supported yet; merge whole models with `models:`",
)
TOKENIZER = Feature(
    "tokenizer",
    True,
    "tokenizer merging is not supported yet (the merged commit keeps the base's tokenizer files); remove the key",
)
LORA = Feature(
    "lora",
    True,
    "a LoRA applied to a model (`model+lora`) is not supported yet; merge the adapter into the model "
    "first (peft's merge_and_unload), then give that model",
)
RNG = Feature(
    "rng-mergekit",
    True,
    "mgit's random methods draw from their own seeded generator (`mgit merge --seed N`, recorded), "
    "not torch's global one: mergekit's draws are not reproduced yet",
)
FEATURES = (SLICES, TOKENIZER, LORA, RNG)


@dataclass(frozen=True)
class Key:
    """One config key or option: honoured (``what``: what it does in mgit, or its mgit
    equivalent) or refused (``what``: why, and what to do instead). A key of a feature is
    refused with the feature's line until the feature lands."""

    path: str
    honoured: bool
    what: str
    feature: Feature | None = None

    @property
    def honoured_now(self) -> bool:
        return self.honoured and (self.feature is None or self.feature.lands)

    @property
    def reason(self) -> str:
        if self.feature is not None and not self.feature.lands:
            return self.feature.refusal
        return self.what

    @property
    def status(self) -> str:
        return "honoured" if self.honoured_now else "refused"


# -- the config -------------------------------------------------------------------------------

_HUB = (
    "a revision of this repository (branch, tag, commit) or a model directory; "
    "an `org/name` Hugging Face id is refused: download it and give its path, or `mgit add` it and name the commit"
)


def _reference(path: str, what: str, feature: Feature | None = None) -> list[Key]:
    """A mergekit ``ModelReference`` at ``path``: ``NAME``, ``NAME+LORA``, or its mapping form."""
    return [
        Key(path, True, what, feature),
        Key(f"{path}.model", True, "the mapping form's model (`model: {path: ...}`)", feature),
        Key(f"{path}.model.path", True, "the model: " + _HUB, feature),
        Key(
            f"{path}.model.revision",
            False,
            "a Hugging Face revision; here the model itself is named by an mgit revision (branch, tag, commit)",
            feature,
        ),
        Key(f"{path}.lora", True, "a LoRA adapter applied to the model before merging (`model+lora`)", LORA),
        Key(f"{path}.lora.path", True, "the LoRA adapter's directory", LORA),
        Key(f"{path}.lora.revision", False, "a Hugging Face revision of the adapter; give its directory", LORA),
        Key(
            f"{path}.override_architecture",
            False,
            "mgit merges tensors by name and checks the inputs' config.json `architectures` "
            "(mgit merge --allow-crimes to mix them); there is no architecture to override",
            feature,
        ),
    ]


def _setting(path: str, what: str, feature: Feature | None = None) -> list[Key]:
    """A mapping of mergekit parameter settings at ``path``: a scalar, a gradient, or conditions."""
    return [
        Key(path, True, what, feature),
        Key(
            f"{path}.*", True, "a parameter of the method: a scalar, a gradient over the layers, or conditions", feature
        ),
        Key(f"{path}.*.value", True, "a condition's value (a scalar or a gradient)", feature),
        Key(f"{path}.*.filter", True, "a condition's filter: a substring of the tensor name, `*` or absent", feature),
        Key(f"{path}.*[].value", True, "a condition's value (a scalar or a gradient)", feature),
        Key(f"{path}.*[].filter", True, "a condition's filter (the first matching condition applies)", feature),
    ]


def _models(path: str, feature: Feature | None = None) -> list[Key]:
    """A list of mergekit ``InputModelDefinition``."""
    return [
        Key(path, True, "the models to merge (the base may be listed; it is not an expert)", feature),
        *_reference(f"{path}[].model", "an input model: " + _HUB, feature),
        *_setting(f"{path}[].parameters", "this model's parameters, over the config's", feature),
    ]


def _slices(path: str) -> list[Key]:
    """A list of mergekit ``OutputSliceDefinition`` (layer surgery)."""
    return [
        Key(path, True, "output layers built slice by slice from input layer ranges", SLICES),
        Key(f"{path}[].sources", True, "the input slices one output slice merges", SLICES),
        *_reference(f"{path}[].sources[].model", "a source slice's model: " + _HUB, SLICES),
        Key(f"{path}[].sources[].layer_range", True, "a source slice's layers [start, end)", SLICES),
        *_setting(f"{path}[].sources[].parameters", "this source's parameters, over the slice's", SLICES),
        *_reference(f"{path}[].base_model", "the slice's base model: " + _HUB, SLICES),
        Key(
            f"{path}[].residual_weight",
            False,
            "mergekit's residual weight of a slice is not supported: merge the slice without it",
            SLICES,
        ),
        *_setting(f"{path}[].parameters", "the slice's parameters, over the config's", SLICES),
    ]


def _tokenizer() -> list[Key]:
    embedding = "tokenizer.tokens.*.source"
    return [
        Key("tokenizer", True, "the output tokenizer: its source and chosen token embeddings", TOKENIZER),
        *_reference("tokenizer.source", "`union`, `base`, or a model whose tokenizer is kept", TOKENIZER),
        Key("tokenizer.tokens", True, "per token, where its embedding comes from", TOKENIZER),
        Key("tokenizer.tokens.*", True, "one token's embedding", TOKENIZER),
        Key("tokenizer.tokens.*.force", True, "use the source's embedding even where the token exists", TOKENIZER),
        *_reference(embedding, "the token's embedding: a model, a model's token, or zero", TOKENIZER),
        # a model's token: its `model` is a model reference too (the key itself is listed above)
        *_reference(f"{embedding}.model", "the model whose token is taken", TOKENIZER)[1:],
        Key(f"{embedding}.kind", True, "`model_token` or `zero`", TOKENIZER),
        Key(f"{embedding}.token_id", True, "the source model's token id", TOKENIZER),
        Key(f"{embedding}.token", True, "the source model's token", TOKENIZER),
        Key("tokenizer.pad_to_multiple_of", True, "pad the vocabulary to a multiple", TOKENIZER),
    ]


_CONFIG = [
    Key("merge_method", True, "the method (`mgit merge --help` lists them)"),
    *_reference("base_model", "the base: " + _HUB),
    *_models("models"),
    *_setting("parameters", "the parameters of every model, and the method's global ones"),
    Key("dtype", True, "the working dtype (mergekit's names: bfloat16, float16, float32)"),
    Key("out_dtype", True, "the merged tensors' dtype"),
    *_slices("slices"),
    Key("modules", True, "per-module merges: the one module `default` of a text model (others refused)", SLICES),
    Key("modules.*", True, "one module's merge (`default`)", SLICES),
    *_slices("modules.*.slices"),
    Key("modules.*.models", False, "a module's `models:` is not supported: give `models:` at the top level", SLICES),
    *_setting("modules.*.parameters", "the module's parameters, over the config's", SLICES),
    *_reference("tokenizer_source", "`union`, `base`, or the model whose tokenizer is kept", TOKENIZER),
    *_tokenizer(),
    Key("chat_template", True, "the output tokenizer's chat template", TOKENIZER),
]
CONFIG_KEYS: dict[str, Key] = {k.path: k for k in _CONFIG}
assert len(CONFIG_KEYS) == len(_CONFIG), "a config key listed twice"

# -- mergekit-yaml's options (mergekit.options.MergeOptions, by option name) ------------------

_NO_EFFECT = "changes how mergekit runs, not the result; mgit streams the merge on the CPU cores by itself"
_OPTIONS = [
    Key("--allow-crimes", True, "mgit merge --allow-crimes: inputs whose config.json architectures differ"),
    Key(
        "--unsafe-truncate-embeddings",
        False,
        "mgit refuses inputs whose vocab_size or embedding shapes differ rather than dropping rows",
    ),
    Key("--transformers-cache", False, "mgit downloads nothing: models are revisions here or directories"),
    Key(
        "--lora-merge-cache",
        True,
        "an adapter applied to a model is kept as a commit under refs/imports/lora/, found again for the same pair",
        LORA,
    ),
    Key(
        "--lora-merge-dtype",
        False,
        "mgit applies an adapter in the model's own dtype, as mergekit does by default; cast the model first",
        LORA,
    ),
    Key("--cuda", False, _NO_EFFECT),
    Key("--device", False, _NO_EFFECT),
    Key("--low-cpu-memory", False, _NO_EFFECT),
    Key(
        "--out-shard-size",
        False,
        "the merged model keeps the base's files and their tensors (its sharding); reshard after checkout",
    ),
    Key("--copy-tokenizer", True, "the default: the merged commit keeps the base's tokenizer and other files"),
    Key("--clone-tensors", False, _NO_EFFECT),
    Key("--trust-remote-code", False, "mgit runs no model code: it reads config.json and safetensors headers only"),
    Key("--random-seed", True, "mgit merge --rng mergekit --seed N: mergekit's draws, reproduced", RNG),
    Key("--lazy-unpickle", False, "mgit reads safetensors only (no pickles); " + _NO_EFFECT),
    Key(
        "--write-model-card",
        False,
        "mgit writes no README.md: the merge commit's plan record says how it was made (mgit show, mgit.plan/1)",
    ),
    Key("--safe-serialization", True, "the default and the only output: safetensors"),
    Key("-v", False, "mgit's messages are fixed; --debug shows a traceback"),
    Key("--quiet", True, "mgit -q"),
    Key("--read-to-gpu", False, _NO_EFFECT),
    Key("--multi-gpu", False, _NO_EFFECT),
    Key("--num-threads", False, _NO_EFFECT),
    Key("--gpu-rich", False, _NO_EFFECT),
    Key("--async-write", False, _NO_EFFECT),
    Key("--write-threads", False, _NO_EFFECT),
]
OPTIONS: dict[str, Key] = {k.path: k for k in _OPTIONS}


def option_name(field: str) -> str:
    """A MergeOptions field's ``mergekit-yaml`` option (``verbosity`` is ``-v``)."""
    return "-v" if field == "verbosity" else "--" + field.replace("_", "-")


# -- looking keys up --------------------------------------------------------------------------


def parent(path: str) -> str | None:
    """The key a path lies under (``models[].model`` → ``models[]`` → ``models``), or None."""
    if path.endswith("[]"):
        return path[:-2]
    cut = path.rfind(".")
    return path[:cut] if cut > 0 else None


def covering(path: str) -> Key | None:
    """The key that decides ``path``: the outermost key above it refused (which refuses
    everything under it), else its own; None: mgit does not know the key."""
    return refused_above(path) or CONFIG_KEYS.get(path)


def refused_above(path: str) -> Key | None:
    """The outermost key above ``path`` that is refused (the one a config hits first), if any."""
    found, above = None, parent(path)
    while above is not None:
        key = CONFIG_KEYS.get(above)
        if key is not None and not key.honoured_now:
            found = key
        above = parent(above)
    return found


def _child(path: str, name: str) -> str | None:
    """The table's path of key ``name`` under ``path``: its own, else the free-key form ``*``."""
    for candidate in (f"{path}.{name}" if path else name, f"{path}.*"):
        if candidate in CONFIG_KEYS:
            return candidate
    return None


def _given(value: Any, path: str, shown: str) -> Iterator[tuple[str, str, Any]]:
    """(table path, path as written, value) of every key a config gives, top down."""
    if isinstance(value, list):
        for i, item in enumerate(value):
            yield from _given(item, f"{path}[]", f"{shown}[{i}]")
        return
    lora = next((f"{path}{s}" for s in (".lora", ".model.lora") if f"{path}{s}" in CONFIG_KEYS), None)
    if isinstance(value, str) and "+" in value and lora is not None:
        yield lora, f"{shown} ({value!r})", value  # mergekit's NAME+LORA
    if not isinstance(value, dict):
        return
    for name, item in value.items():
        if item is None:  # mergekit's keys are optional: null is as absent
            continue
        at = f"{shown}.{name}" if shown else str(name)
        key = _child(path, str(name))
        if key is None:
            yield f"{path}.{name}" if path else str(name), at, item
            continue
        yield key, at, item
        yield from _given(item, key, at)


def refuse_keys(doc: dict[str, Any], where: str) -> None:
    """Every key the config gives is one mgit honours, or one line naming the first that is
    refused (and why) or unknown to mergekit 0.1.5."""
    for path, shown, _ in _given(doc, "", ""):
        key = covering(path)
        if key is None:
            raise BadInputError(f"{where}: unknown key {shown} (mergekit 0.1.5 has no such key)")
        if not key.honoured_now:
            raise BadInputError(f"{where}: {shown}: {key.reason}")


def reference(value: Any) -> Any:
    """A model reference as mgit resolves it: its mapping form's ``model.path`` (or ``model``)
    as the name, ``NAME+LORA`` with a ``lora.path`` (or ``lora``); other values as given
    (refuse_keys refused the rest)."""
    if isinstance(value, dict):
        model, lora = value.get("model"), value.get("lora")
        name = model.get("path") if isinstance(model, dict) else model
        adapter = lora.get("path") if isinstance(lora, dict) else lora
        return f"{name}+{adapter}" if isinstance(name, str) and isinstance(adapter, str) else name
    return value


# -- the documented table -----------------------------------------------------------------------


def markdown_table() -> str:
    """docs/merging.md's "YAML keys" table: every key not covered by a refused key above it,
    then every mergekit-yaml option."""
    rows = ["| key | mgit | what it does, or why it is refused |", "|---|---|---|"]
    rows += [f"| `{k.path}` | {k.status} | {k.reason} |" for k in _CONFIG if refused_above(k.path) is None]
    rows += ["", "| mergekit-yaml option | mgit | its mgit equivalent, or why it is refused |", "|---|---|---|"]
    rows += [f"| `{k.path}` | {k.status} | {k.reason} |" for k in _OPTIONS]
    return "\n".join(rows)
