"""The merged model's tokenizer, built and written as mergekit 0.1.5 builds and writes it
(mergekit/tokenizer/build.py, merge.py): with the ``transformers`` tokenizer classes, so that the
files saved are the files mergekit saves.

``base``: the base's tokenizer; a model: that model's; ``union``: the base's, then every token of
the other inputs it lacks appended: first their ordinary tokens, then their added tokens (with
their settings, the first input's where they differ). mergekit takes an ordinary token's order
from a hash map's (so it differs from run to run where several are new); mgit takes them in id
order, input by input. ``tokens:`` of a config not in the vocabulary are added last. The token
rows follow in mgit.merge.vocab.
"""

from __future__ import annotations

import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mgit.errors import BadInputError
from mgit.merge.vocab import BASE, UNION, TokenizerSpec

# The files a tokenizer is made of: replaced in the merged model by those the new one writes.
TOKENIZER_FILES = (
    "tokenizer.json",
    "tokenizer_config.json",
    "special_tokens_map.json",
    "added_tokens.json",
    "tokenizer.model",
    "vocab.json",
    "vocab.txt",
    "merges.txt",
    "chat_template.jinja",
    "chat_template.json",
)


@dataclass
class InputTokenizer:
    """One merge input's tokenizer (loaded from its files) and its embedding rows (``vocab_size``
    of its config.json, else the tokenizer's length)."""

    name: str
    tokenizer: Any  # transformers.PreTrainedTokenizerBase
    rows: int

    @property
    def vocab(self) -> dict[str, int]:
        return dict(self.tokenizer.get_vocab())


def _transformers() -> Any:
    try:
        import transformers
    except ImportError:
        raise BadInputError(
            "merging tokenizers needs the transformers package: pip install 'mgit[tokenizers]'"
        ) from None
    return transformers


def load_tokenizer(directory: Path, name: str, rows: int | None) -> InputTokenizer:
    """The tokenizer saved in ``directory`` (a fast one), refused where its ids run past the
    model's embedding rows (mergekit would cut such a tokenizer down; mgit does not)."""
    auto = _transformers().AutoTokenizer
    try:
        tok = auto.from_pretrained(str(directory), use_fast=True, local_files_only=True)  # mgit downloads nothing
    except Exception as exc:  # whatever a tokenizer's files make transformers raise: one line naming the input
        raise BadInputError(f"{name}: cannot load its tokenizer ({str(exc).splitlines()[0]})") from None
    vocab = tok.get_vocab()
    size = rows if rows is not None else len(vocab)
    past = sorted(t for t, i in vocab.items() if i >= size)
    if past:
        raise BadInputError(f"{name}: its tokenizer has {len(past)} token(s) past the model's {size} rows: {past[0]!r}")
    return InputTokenizer(name, tok, size)


def _reloaded(tok: Any) -> Any:
    """A copy of ``tok`` through its saved files (what mergekit extends, leaving the base as it was)."""
    with tempfile.TemporaryDirectory(prefix="mgit-tokenizer-") as tmp:
        tok.save_pretrained(tmp)
        return _transformers().AutoTokenizer.from_pretrained(tmp, use_fast=True, local_files_only=True)


def union(base: InputTokenizer, others: Sequence[InputTokenizer]) -> Any:
    """The base's tokenizer with every token of ``others`` it lacks: ordinary tokens (in id order,
    input by input), then added tokens (each with its first input's settings)."""
    ordinary: dict[str, None] = {}
    added: dict[str, Any] = {}
    for item in (base, *others):
        specials = {info.content for info in item.tokenizer.added_tokens_decoder.values()}
        for token, _ in sorted(item.vocab.items(), key=lambda kv: kv[1]):
            if token not in specials:
                ordinary.setdefault(token)
        for _, info in sorted(item.tokenizer.added_tokens_decoder.items()):
            added.setdefault(info.content, info)
    out = _reloaded(base.tokenizer)
    have = base.vocab
    for token in ordinary:
        if token not in have and token not in added:
            out.add_tokens(token)
    for info in added.values():
        out.add_tokens(info)
    return out


def output_tokenizer(spec: TokenizerSpec, base: InputTokenizer, inputs: Mapping[str, InputTokenizer]) -> Any:
    """The merged model's tokenizer: the spec's source, then its ``tokens:`` the vocabulary lacks."""
    if spec.source == UNION:
        out = union(base, [t for n, t in inputs.items() if n != base.name])
    elif spec.source == BASE or spec.source is None:
        out = _reloaded(base.tokenizer)
    elif spec.source in inputs:
        out = _reloaded(inputs[spec.source].tokenizer)
    else:
        raise BadInputError(f"tokenizer source {spec.source!r} is union, base or one of the merged models")
    have = set(out.get_vocab())
    for token in spec.tokens:
        if token not in have:
            out.add_tokens(token)
            have.add(token)
    return out


def chat_template(template: str, inputs: Sequence[InputTokenizer]) -> str | None:
    """The template a config's ``chat_template`` names: ``auto`` (the inputs' most common; None
    where none has one), one of mergekit's named templates (read from the installed mergekit),
    or Jinja text."""
    if template == "auto":
        found = []
        for item in inputs:
            own = item.tokenizer.chat_template
            own = own.get("default") if isinstance(own, dict) else own
            if own:
                found.append(own.strip())
        return Counter(found).most_common(1)[0][0] if found else None
    if len(template) < 256 and "\n" not in template and "{" not in template:
        named = _named_template(template)
        if named is not None:
            return named
    if len(template) < 20 or "{" not in template:
        raise BadInputError(f"chat_template {template!r} is neither a known template's name nor Jinja text")
    return template


def _named_template(name: str) -> str | None:
    """mergekit's template of that name (alpaca, chatml, llama3, ...), where mergekit is installed."""
    try:
        from importlib.resources import files

        path = files("mergekit._data.chat_templates").joinpath(name + ".jinja")
    except ImportError:
        raise BadInputError(
            f"chat_template {name!r}: named templates are mergekit's (pip install mergekit), or give the Jinja text"
        ) from None
    return path.read_text() if path.is_file() else None


def saved_files(tokenizer: Any, template: str | None) -> dict[str, bytes]:
    """File name → bytes of the tokenizer saved as mergekit saves it (with the template set)."""
    if template is not None:
        tokenizer.chat_template = template
    with tempfile.TemporaryDirectory(prefix="mgit-tokenizer-") as tmp:
        tokenizer.save_pretrained(tmp)
        return {p.name: p.read_bytes() for p in sorted(Path(tmp).iterdir()) if p.is_file()}
