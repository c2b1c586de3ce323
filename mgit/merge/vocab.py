"""A mergekit config's tokenizer keys, and the token-row arithmetic they ask for.

``tokenizer_source: union|base|<model>`` or a ``tokenizer:`` block (``source``, per-token
``tokens:`` with ``source``/``force``, ``pad_to_multiple_of``) give the merged model a vocabulary
of its own; every input's embedding and output-head rows are then moved to that vocabulary's
ids before the method merges them, as mergekit 0.1.5 does (mergekit/tokenizer/embed.py): a
token an input lacks gets a default row, decided once for all inputs, and rows past the
vocabulary (``pad_to_multiple_of``) are the mean of the others. The vocabulary itself is built
with the tokenizer libraries (mgit.merge.tokenizer); here only what follows from it: which input
row goes where (a permutation), which default each token gets (:func:`row_plan`), and the rows
themselves (torch, the same operations in the same order as mergekit, so bf16 rows are equal bit
for bit).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError
from mgit.merge.config_keys import reference

if TYPE_CHECKING:
    import torch

UNION, BASE = "union", "base"
ABSENT = -1  # a permutation's entry for a token the input lacks


@dataclass(frozen=True)
class TokenSource:
    """Where a token's row comes from when it needs a default (``tokens:`` in a config, or decided
    by :func:`row_plan`): ``kind`` is ``model`` (that input's row for the token), ``model_token``
    (that input's row ``token_id``, or of ``token`` in its own vocabulary), ``zero``, ``average``
    (the mean of the inputs that hold it) or ``none`` (a token only added, no source)."""

    kind: str
    model: str | None = None
    token_id: int | None = None
    token: str | None = None
    force: bool = False  # the default replaces the row even in inputs that hold the token

    def to_json(self) -> dict[str, Any]:
        doc: dict[str, Any] = {"kind": self.kind}
        for key in ("model", "token_id", "token"):
            if getattr(self, key) is not None:
                doc[key] = getattr(self, key)
        if self.force:
            doc["force"] = True
        return doc


@dataclass(frozen=True)
class TokenizerSpec:
    """A config's tokenizer keys: the vocabulary's source (``union``, ``base`` or a model as the
    config names it; None: the vocabulary is the donor's, only ``chat_template`` asked), the
    per-token sources (in the config's order: new tokens are added in it), the padding, the
    chat template (a name or Jinja text)."""

    source: str | None
    tokens: dict[str, TokenSource] = field(default_factory=dict)
    pad_to_multiple_of: int | None = None
    chat_template: str | None = None

    @property
    def aligns(self) -> bool:
        """Whether the vocabulary is rebuilt (rows moved); else only the template is set."""
        return self.source is not None


def _token_source(token: str, doc: Any, where: str) -> TokenSource:  # noqa: C901 (one check per form mergekit accepts)
    label = f"{where}: tokenizer.tokens[{token!r}]"
    if not isinstance(doc, dict) or set(doc) - {"source", "force"}:
        raise BadInputError(f"{label} takes `source:` and `force:` only")
    force = doc.get("force", False)
    if not isinstance(force, bool):
        raise BadInputError(f"{label}.force must be true or false")
    src = doc.get("source")
    if isinstance(src, dict) and "kind" not in src:  # a model reference's mapping form
        src = reference(src)
    if src is None:
        return TokenSource("none", force=force)
    if isinstance(src, str):
        return TokenSource("model", model=src, force=force)
    if not isinstance(src, dict):
        raise BadInputError(f"{label}.source is a model, {{kind: zero}} or {{kind: model_token, ...}}")
    kind = src.get("kind")
    if kind == "zero" and set(src) == {"kind"}:
        return TokenSource("zero", force=force)
    if kind != "model_token" or set(src) - {"kind", "model", "token_id", "token"}:
        raise BadInputError(f"{label}.source: kind is `zero` or `model_token` (with model and token or token_id)")
    model, token_id, name = reference(src.get("model")), src.get("token_id"), src.get("token")
    if not isinstance(model, str) or (token_id is None) == (name is None):
        raise BadInputError(f"{label}.source: model_token needs a model and one of token_id or token")
    if token_id is not None and (not isinstance(token_id, int) or isinstance(token_id, bool) or token_id < 0):
        raise BadInputError(f"{label}.source.token_id must be a non-negative integer")
    if name is not None and not isinstance(name, str):
        raise BadInputError(f"{label}.source.token must be a string")
    return TokenSource("model_token", model=model, token_id=token_id, token=name, force=force)


def parse_spec(doc: Mapping[str, Any], where: str) -> TokenizerSpec | None:  # noqa: C901 (one check per key)
    """The tokenizer keys of a config (None: it has none), checked as mergekit checks them."""
    source, block, template = reference(doc.get("tokenizer_source")), doc.get("tokenizer"), doc.get("chat_template")
    if source is None and block is None and template is None:
        return None
    if source is not None and block is not None:
        raise BadInputError(f"{where}: give either tokenizer_source or tokenizer:, not both")
    if template is not None and not isinstance(template, str):
        raise BadInputError(f"{where}: chat_template is a template's name or Jinja text")
    if source is not None and not isinstance(source, str):
        raise BadInputError(f"{where}: tokenizer_source is union, base or a model")
    if block is None:
        return TokenizerSpec(source, chat_template=template)
    if not isinstance(block, dict) or set(block) - {"source", "tokens", "pad_to_multiple_of"}:
        raise BadInputError(f"{where}: tokenizer: takes source, tokens and pad_to_multiple_of")
    source = reference(block.get("source", UNION))
    if not isinstance(source, str):
        raise BadInputError(f"{where}: tokenizer.source is union, base or a model")
    pad = block.get("pad_to_multiple_of")
    if pad is not None and (not isinstance(pad, int) or isinstance(pad, bool) or pad < 1):
        raise BadInputError(f"{where}: tokenizer.pad_to_multiple_of must be a positive integer")
    tokens = block.get("tokens") or {}
    if not isinstance(tokens, dict) or not all(isinstance(t, str) for t in tokens):
        raise BadInputError(f"{where}: tokenizer.tokens maps tokens to their sources")
    parsed = {t: _token_source(t, d if d is not None else {}, where) for t, d in tokens.items()}
    return TokenizerSpec(source, parsed, pad, template)


def padded_size(size: int, multiple: int | None) -> int:
    """The vocabulary size rounded up to ``multiple`` (mergekit's ``pad_to_multiple_of``)."""
    if multiple and size % multiple:
        return (size // multiple + 1) * multiple
    return size


def permutation(vocab: Mapping[str, int], model_vocab: Mapping[str, int], rows: int, label: str) -> list[int]:
    """For each id of the output vocabulary, the input's row holding that token (``ABSENT``: the
    input lacks it). A token the input's tokenizer places past its embedding rows is refused:
    mergekit leaves such a token without a row and then fails."""
    out = [ABSENT] * len(vocab)
    for token, new_id in vocab.items():
        old = model_vocab.get(token)
        if old is None:
            continue
        if old >= rows:
            raise BadInputError(f"{label}: token {token!r} has id {old} past the model's {rows} embedding rows")
        out[new_id] = old
    return out


@dataclass(frozen=True)
class DefaultRow:
    """A token whose row is not every input's own: its id, its source, and whether it replaces
    the inputs' own rows (``force``) or only fills the inputs lacking it."""

    token: str
    token_id: int
    source: TokenSource

    def to_json(self) -> dict[str, Any]:
        return {"token": self.token, "id": self.token_id, "source": self.source.to_json()}


def row_plan(
    vocab: Mapping[str, int],
    models: Sequence[str],
    perms: Mapping[str, Sequence[int]],
    configured: Mapping[str, TokenSource],
    base: str | None,
) -> list[DefaultRow]:
    """The tokens needing a default row (some input lacks them, or their config forces one), in
    vocabulary order, with their source: the config's; else the one input holding it; else the
    base where the base holds it; else the mean of those holding it; zero where none does
    (mergekit's ``assign_embedding_sources``)."""
    out = []
    for token, token_id in vocab.items():
        has = [perms[m][token_id] != ABSENT for m in models]
        cfg = configured.get(token)
        if all(has) and not (cfg is not None and cfg.force):
            continue
        if cfg is None:
            present = [m for m, h in zip(models, has, strict=True) if h]
            if len(present) == 1:
                cfg = TokenSource("model", model=present[0])
            elif not present:
                cfg = TokenSource("zero")
            elif base is not None and base in models and perms[base][token_id] != ABSENT:
                cfg = TokenSource("model", model=base)
            else:
                cfg = TokenSource("average")
        if cfg.kind == "none":
            raise BadInputError(f"token {token!r} needs a row from somewhere: give its tokens: entry a source")
        if cfg.kind == "model" and perms[_known(cfg.model, models, token)][token_id] == ABSENT:
            raise BadInputError(f"token {token!r}: its source {cfg.model} does not hold it")
        out.append(DefaultRow(token, token_id, cfg))
    return out


def _known(model: str | None, models: Sequence[str], token: str) -> str:
    if model is None or model not in models:
        raise BadInputError(f"token {token!r}: its source {model} is not one of the merged models")
    return model


def default_rows(
    plan: Sequence[DefaultRow],
    models: Sequence[str],
    tensors: Mapping[str, torch.Tensor],
    perms: Mapping[str, Sequence[int]],
    own_vocabs: Mapping[str, Mapping[str, int]],
) -> dict[int, torch.Tensor]:
    """Token id → its default row, from the inputs' rows (all in one dtype), computed as mergekit
    computes it: a mean is a running sum from zero over the inputs in order, then divided."""
    import torch

    first = tensors[models[0]]
    out = {}
    for row in plan:
        src = row.source
        if src.kind == "average":
            embed = torch.zeros(first.shape[1:], dtype=first.dtype)
            count = 0
            for m in models:
                if perms[m][row.token_id] != ABSENT:
                    embed = embed + tensors[m][perms[m][row.token_id]]
                    count += 1
            embed /= count
        elif src.kind == "zero":
            embed = first.new_zeros(first.shape[1:])
        elif src.kind == "model":
            assert src.model is not None
            embed = tensors[src.model][perms[src.model][row.token_id]]
        else:
            embed = _model_token_row(src, row.token, tensors, own_vocabs)
        out[row.token_id] = embed
    return out


def _model_token_row(
    src: TokenSource, token: str, tensors: Mapping[str, torch.Tensor], own_vocabs: Mapping[str, Mapping[str, int]]
) -> torch.Tensor:
    """``{kind: model_token}``: a row of the model's own tensor, by id or by the id its own
    tokenizer gives ``token``."""
    model = src.model
    if model is None or model not in tensors:
        raise BadInputError(f"token {token!r}: its source {model} is not one of the merged models")
    token_id = src.token_id
    if token_id is None:
        token_id = own_vocabs[model].get(str(src.token))
        if token_id is None:
            raise BadInputError(f"token {token!r}: {model}'s tokenizer has no token {src.token!r}")
    if token_id >= tensors[model].shape[0]:
        raise BadInputError(f"token {token!r}: id {token_id} is past {model}'s {tensors[model].shape[0]} rows")
    return tensors[model][token_id]


def aligned_rows(
    tensor: torch.Tensor,
    perm: Sequence[int],
    defaults: Mapping[int, torch.Tensor],
    forced: set[int],
    size: int,
) -> torch.Tensor:
    """One input's tensor with its rows at the output vocabulary's ids: its own row where it holds
    the token (unless forced), else the token's default; rows past the vocabulary (padding) are
    the mean of the vocabulary's rows."""
    import torch

    out = torch.zeros((size, *tensor.shape[1:]), dtype=tensor.dtype)
    own = [(new_id, old) for new_id, old in enumerate(perm) if old != ABSENT and new_id not in forced]
    if own:  # rows copied as they are: one gather instead of a Python step per token
        out[torch.tensor([n for n, _ in own])] = tensor[torch.tensor([o for _, o in own])]
    for new_id, row in defaults.items():
        if perm[new_id] == ABSENT or new_id in forced:
            out[new_id] = row
    if size > len(perm):
        out[len(perm) :] = torch.mean(out[: len(perm)], dim=0)
    return out


def runs(perm: Sequence[int]) -> list[list[int]]:
    """A permutation as ``[new id, old id, length]`` runs of consecutive ids (absent tokens left
    out): the plan record's compact form of where each input's rows went."""
    out: list[list[int]] = []
    for new_id, old in enumerate(perm):
        if old == ABSENT:
            continue
        if out and out[-1][0] + out[-1][2] == new_id and out[-1][1] + out[-1][2] == old:
            out[-1][2] += 1
        else:
            out.append([new_id, old, 1])
    return out
