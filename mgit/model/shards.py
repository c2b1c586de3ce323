"""Where the tensors of a state dict committed from memory go among a model's safetensors
files: each given tensor replaces the one of its name in the file that holds it, a new name
joins the last file, every tensor not given stays as it is, and a tensor leaves the model only
when the caller names it (or asks for the whole model to be replaced). Also the shard index
(``model.safetensors.index.json``) that lists them, and the tied output embedding that is
not to be added under a second name.

Pure functions over names (and, for the tie, tensors): the caller reads and writes the files.
"""

from __future__ import annotations

import json
import posixpath
import re
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from mgit.errors import BadInputError

if TYPE_CHECKING:
    import torch

SHARD_INDEX = "model.safetensors.index.json"
TIED_OUTPUT = "lm_head.weight"  # the output projection `tie_word_embeddings` ties to the input embedding
_INPUT_EMBEDDING = re.compile(r"(?:^|\.)(?:embed_tokens|wte|word_embeddings|tok_embeddings)\.weight$")


@dataclass(frozen=True)
class ShardPlan:
    """The model's files after the commit: each file's tensors in data order (the order the
    file had, names new to the model after), the files whose content changes, and the tensors
    of the saved model that leave it."""

    files: dict[str, list[str]]
    written: set[str]
    removed: list[str]


def plan_shards(
    saved: Mapping[str, list[str]], given: Iterable[str], new_home: str, drop: Collection[str]
) -> ShardPlan:
    """``saved``: each file of the model → its tensors in data order; ``given``: the names
    the state dict carries; ``new_home``: the file that takes names the model lacks;
    ``drop``: tensors of the saved model to remove (never given ones)."""
    home = {name: path for path, names in saved.items() for name in names}
    given = set(given)
    files = {path: [n for n in names if n not in drop] for path, names in saved.items()}
    written = {home[n] for n in given | set(drop) if n in home}
    added = sorted(given - set(home))
    if added:
        files.setdefault(new_home, []).extend(added)
        written.add(new_home)
    removed = sorted(n for n in drop if n in home)
    return ShardPlan(files, written, removed)


def removals(
    saved: Iterable[str], given: Collection[str], delete: Iterable[str], replace: bool, model: str
) -> set[str]:
    """The tensors of the saved model a commit removes: those named in ``delete`` (each must
    be a tensor of the model and not also given), and with ``replace`` every one not given."""
    saved = set(saved)
    delete = list(delete)
    unknown = [n for n in delete if n not in saved]
    if unknown:
        raise BadInputError(f"cannot delete {_names(unknown)}: not a tensor of model {model or '.'!r}")
    both = [n for n in delete if n in given]
    if both:
        raise BadInputError(f"{_names(both)} is both given and named to delete; pass it in one of them only")
    drop = set(delete)
    if replace:
        drop |= saved - set(given)
    return drop


def _names(names: list[str]) -> str:
    shown = ", ".join(repr(n) for n in names[:3])
    return shown + (f" and {len(names) - 3} more" if len(names) > 3 else "")


def tied_aliases(state_dict: Mapping[str, torch.Tensor], saved: Collection[str], tied: bool) -> set[str]:
    """Names of the state dict not to add to the model: a name the saved model lacks whose
    tensor is a tensor of the state dict the model holds under another name (the same view of
    the same storage, as ``nn.Module.state_dict()`` lists a tied weight under both names), and
    ``lm_head.weight`` when the saved model lacks it (or, for a first commit, the config sets
    ``tie_word_embeddings``) and it shares storage with or equals the input embedding given."""
    out = set()
    kept = {_view(state_dict[n]) for n in state_dict if n in saved} - {None}
    for name in sorted(state_dict):
        if name not in saved and _view(state_dict[name]) in kept:
            out.add(name)
    output = state_dict.get(TIED_OUTPUT)
    if output is not None and TIED_OUTPUT not in saved and (saved or tied):
        embedding = next((state_dict[n] for n in sorted(state_dict) if _INPUT_EMBEDDING.search(n)), None)
        if embedding is not None and _same_values(output, embedding):
            out.add(TIED_OUTPUT)
    return out


def _view(t: torch.Tensor) -> tuple[Any, ...] | None:
    """What makes two tensors one: their storage, offset, dtype, shape and strides (None for
    a tensor without elements or storage: nothing tells two of those apart)."""
    ptr = t.untyped_storage().data_ptr() if t.numel() else 0
    if not ptr:
        return None
    return (t.device, ptr, t.storage_offset(), t.dtype, tuple(t.shape), t.stride())


def _same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    import torch

    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    return (_view(a) is not None and _view(a) == _view(b)) or torch.equal(a, b)


def ties_embeddings(config: bytes | None) -> bool:
    """Whether a model's config.json sets ``tie_word_embeddings`` (False when unreadable)."""
    try:
        doc = json.loads(config) if config is not None else None
    except (ValueError, RecursionError):
        return False
    return isinstance(doc, dict) and doc.get("tie_word_embeddings") is True


@dataclass(frozen=True)
class ModelFiles:
    """A model's safetensors files (path → tensor names) and each tensor's size."""

    files: Mapping[str, list[str]]
    sizes: Mapping[str, TensorSize]

    def weight_map(self, model_dir: str) -> dict[str, str]:
        """Tensor name → its file, relative to the model directory (as index.json lists them)."""
        rel = {path: posixpath.relpath(path, model_dir or ".") for path in self.files}
        return {name: rel[path] for path, names in self.files.items() for name in sorted(names)}

    def totals(self) -> dict[str, int]:
        """The index.json metadata that sums the tensors: bytes and parameters."""
        return {
            "total_size": sum(s.nbytes for s in self.sizes.values()),
            "total_parameters": sum(s.numel for s in self.sizes.values()),
        }


@dataclass(frozen=True)
class TensorSize:
    nbytes: int
    numel: int


def shard_index(old: bytes, model_dir: str, before: ModelFiles, after: ModelFiles) -> bytes | None:
    """The shard index of the model ``after`` the commit: ``old`` (the index of the model
    ``before``) with its weight map and the ``total_size`` / ``total_parameters`` metadata it
    has made to match. None (``old`` is kept byte for byte) when no tensor joined, left or
    changed size, or when ``old`` is no JSON object (not an index mgit can read: left alone)."""
    weight_map, totals = after.weight_map(model_dir), after.totals()
    if weight_map == before.weight_map(model_dir) and totals == before.totals():
        return None
    try:
        doc = json.loads(old)
    except (ValueError, RecursionError):
        return None
    if not isinstance(doc, dict):
        return None
    doc["weight_map"] = weight_map
    if isinstance(doc.get("metadata"), dict):
        doc["metadata"] = {k: totals.get(k, v) for k, v in doc["metadata"].items()}
    return json.dumps(doc, indent=2, sort_keys=True).encode() + b"\n"
