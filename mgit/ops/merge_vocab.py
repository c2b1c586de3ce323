"""A config's tokenizer keys applied to a merge's inputs before it is planned: the merged
vocabulary built from the inputs' tokenizer files (mgit.merge.tokenizer), every input's
embedding and output-head rows moved to its ids (mgit.merge.vocab), and the tokenizer files and
config.json of the merged model.

The aligned tensors are stored as chunks of snapshots no commit holds: the plan merges them as it
merges any input, and the merged model's chunks are delta-encoded against the base's commit (a
parent), never against them (so ``gc`` may drop them). The plan record's ``tokenizer`` says
which vocabulary, which row of each input went where and each default row's source.
"""

from __future__ import annotations

import fnmatch
import json
import posixpath
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from mgit.context import Context
from mgit.errors import BadInputError, chunks_of
from mgit.graph.snapshot import Entry, Snapshot
from mgit.merge.threeway.large_text import LargeFiles, read_contents, store_merged
from mgit.merge.vocab import TokenizerSpec
from mgit.model.dtypes import DType, lookup
from mgit.model.filetree import load_safetensors
from mgit.model.ingest import Ingestor
from mgit.model.safetensors_file import build_header

if TYPE_CHECKING:
    import torch

    from mgit.merge.config import MergeConfig
    from mgit.merge.tokenizer import InputTokenizer

# Tensors indexed by token (vocabulary on axis 0), by name, as the architectures mergekit knows
# name them: input embeddings and output heads.
EMBEDDING_PATTERNS = (
    "*embed_tokens.weight",
    "lm_head.weight",
    "*.wte.weight",
    "*word_embeddings.weight",
    "*embed_in.weight",
    "embed_out.weight",
)


@dataclass(frozen=True)
class Input:
    """One merge input as the vocabulary sees it: its name in the config and its snapshot."""

    name: str
    snap: Snapshot


@dataclass(frozen=True)
class Aligned:
    """The inputs with their rows at the merged vocabulary's ids (by name), the merged model's
    starting snapshot (its tokenizer files and config.json replaced), and the record."""

    snaps: dict[str, Snapshot]
    output: Snapshot
    record: dict[str, Any]


def is_embedding(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, p) for p in EMBEDDING_PATTERNS)


def _read(ctx: Context, snap: Snapshot, path: str) -> bytes | None:
    entry = snap.get(path)
    if entry is None or entry.kind == "safetensors":
        return None
    got = read_contents(ctx.graph, LargeFiles(ctx.store, ctx.pool), (entry,), path)
    if got is None:
        raise BadInputError(f"{path} is too large to read as a tokenizer file")
    return got[0]


def _config(ctx: Context, snap: Snapshot, model_dir: str) -> dict[str, Any] | None:
    raw = _read(ctx, snap, posixpath.join(model_dir, "config.json"))
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except ValueError:
        raise BadInputError(f"{posixpath.join(model_dir, 'config.json')} is not valid JSON") from None
    return doc if isinstance(doc, dict) else None


def load_input(ctx: Context, item: Input, model_dir: str) -> InputTokenizer:
    """The input's tokenizer, loaded from its files written to a temporary directory."""
    from mgit.merge.tokenizer import TOKENIZER_FILES, load_tokenizer

    with tempfile.TemporaryDirectory(prefix="mgit-tokenizer-") as tmp:
        found = False
        for name in (*TOKENIZER_FILES, "config.json"):
            raw = _read(ctx, item.snap, posixpath.join(model_dir, name))
            if raw is not None:
                (Path(tmp) / name).write_bytes(raw)
                found = found or name != "config.json"
        if not found:
            raise BadInputError(f"{item.name} has no tokenizer files in {model_dir or '.'!r}")
        rows = (_config(ctx, item.snap, model_dir) or {}).get("vocab_size")
        return load_tokenizer(Path(tmp), item.name, rows if isinstance(rows, int) else None)


def _store_file(ctx: Context, snap: Snapshot, path: str, data: bytes) -> Entry:
    old = snap.get(path)
    ours = old if old is not None and old.kind != "safetensors" else Entry("blob", ctx.graph.put_blob(b""))
    return store_merged(ctx.graph, LargeFiles(ctx.store, ctx.pool), path, data, ours.mode, ours)


def output_files(
    ctx: Context, snap: Snapshot, model_dir: str, files: Mapping[str, bytes], vocab_rows: int | None
) -> Snapshot:
    """``snap`` with the model's tokenizer files replaced by ``files`` (those the new tokenizer
    does not write are removed: they would describe the old one) and, where the vocabulary
    changed size, config.json's ``vocab_size`` set (its other keys and their order kept)."""
    from mgit.merge.tokenizer import TOKENIZER_FILES

    out = {
        p: e
        for p, e in snap.items()
        if posixpath.dirname(p) != model_dir or posixpath.basename(p) not in TOKENIZER_FILES
    }
    for name, data in files.items():
        path = posixpath.join(model_dir, name)
        out[path] = _store_file(ctx, snap, path, data)
    if vocab_rows is not None:
        cfg_path = posixpath.join(model_dir, "config.json")
        cfg = _config(ctx, snap, model_dir)
        if cfg is not None:
            if "vocab_size" not in cfg:
                raise BadInputError(f"{cfg_path} has no vocab_size to set to the merged vocabulary's {vocab_rows}")
            cfg["vocab_size"] = vocab_rows
            out[cfg_path] = _store_file(ctx, snap, cfg_path, (json.dumps(cfg, indent=2) + "\n").encode())
    return out


def _embedding_tensors(ctx: Context, snap: Snapshot, model_dir: str) -> dict[str, tuple[str, Any]]:
    """Embedding tensor name → (its file, its manifest) in the model of ``snap``."""
    out: dict[str, tuple[str, Any]] = {}
    for path, entry in sorted(snap.items()):
        if entry.kind == "safetensors" and posixpath.dirname(path) == model_dir:
            stored = load_safetensors(ctx.graph, entry.oid, path)
            out.update((n, (path, m)) for n, m in stored.manifests.items() if is_embedding(n))
    return out


def _read_tensor(ctx: Context, name: str, path: str, manifest: Any) -> torch.Tensor:
    from mgit.model.torch_io import tensor_from_bytes

    buf = bytearray(manifest.nbytes)
    offset = 0
    with chunks_of(f"tensor {name!r} in {path}"):
        for chunk in manifest.chunks:
            data = ctx.store.get(chunk.id)
            buf[offset : offset + len(data)] = data
            offset += len(data)
    return tensor_from_bytes(buf, manifest.dtype, manifest.shape)


def align(  # noqa: C901 (the vocabulary, then each tensor's rows, then the files)
    ctx: Context,
    spec: TokenizerSpec,
    model_dir: str,
    inputs: Sequence[Input],
    donor: str,
    base: str | None,
    output: Snapshot,
    dtype: str | None,
) -> Aligned:
    """The inputs (in mergekit's tensor order) aligned to the vocabulary ``spec`` asks for.

    ``donor``: the input whose tokenizer the vocabulary starts from (the config's base, else
    its first model); ``base``: the config's base model, whose rows a token present in several
    inputs takes; ``output``: the merged model's starting snapshot; ``dtype``: the working dtype
    (safetensors name; None: the inputs' promoted)."""
    import torch

    from mgit.merge import tokenizer as tk
    from mgit.merge import vocab as vc
    from mgit.model.torch_io import dtype_name, tensor_bytes, torch_dtype

    names = [i.name for i in inputs]
    toks = {i.name: load_input(ctx, i, model_dir) for i in inputs}
    for token, src in spec.tokens.items():
        if src.model is not None and src.model not in toks:
            raise BadInputError(f"tokenizer.tokens[{token!r}]: {src.model} is not one of the merged models")
    out_tok = tk.output_tokenizer(spec, toks[donor], toks)
    vocab = dict(sorted(out_tok.get_vocab().items(), key=lambda kv: kv[1]))  # in id order: a stable record
    if sorted(vocab.values()) != list(range(len(vocab))):
        raise BadInputError("the merged vocabulary's ids are not 0..n-1")
    size = vc.padded_size(len(vocab), spec.pad_to_multiple_of)
    perms = {n: vc.permutation(vocab, toks[n].vocab, toks[n].rows, n) for n in names}
    plan = vc.row_plan(vocab, names, perms, spec.tokens, base)
    forced = {r.token_id for r in plan if r.source.force}
    own = {n: toks[n].vocab for n in names}
    found = {i.name: _embedding_tensors(ctx, i.snap, model_dir) for i in inputs}
    tensor_names = sorted(set().union(*(set(f) for f in found.values())))
    snaps = {i.name: dict(i.snap) for i in inputs}
    for name in tensor_names:
        holders = [n for n in names if name in found[n]]
        if holders != names:
            raise BadInputError(f"tensor {name!r} is in {', '.join(holders)} only: every merged model needs it")
        tensors = {n: _read_tensor(ctx, name, *found[n][name]) for n in names}
        for n, t in tensors.items():
            if t.dim() != 2 or t.shape[0] != toks[n].rows:
                raise BadInputError(f"{n}: tensor {name!r} {list(t.shape)} is not one row per token ({toks[n].rows})")
        work = torch_dtype(dtype) if dtype else None
        if work is None:
            work = tensors[names[0]].dtype
            for t in tensors.values():
                work = torch.promote_types(work, t.dtype)
        tensors = {n: t.to(work) for n, t in tensors.items()}
        defaults = vc.default_rows(plan, names, tensors, perms, own)
        for n in names:
            rows = vc.aligned_rows(tensors[n], perms[n], defaults, forced, size)
            snaps[n] = _replace_tensor(ctx, snaps[n], found[n][name][0], name, rows, dtype_name, tensor_bytes)
    template = tk.chat_template(spec.chat_template, list(toks.values())) if spec.chat_template else None
    files = tk.saved_files(out_tok, template)
    record = {
        "source": spec.source,
        "donor": donor,
        "base": base,
        "vocab_size": len(vocab),
        "rows": size,
        "pad_to_multiple_of": spec.pad_to_multiple_of,
        "models": names,
        "tensors": tensor_names,
        "rows_from": {n: vc.runs(perms[n]) for n in names},
        "defaults": [r.to_json() for r in plan],
        "files": sorted(files),
    }
    return Aligned(snaps, output_files(ctx, output, model_dir, files, size), record)


def _replace_tensor(
    ctx: Context, snap: Snapshot, path: str, name: str, rows: torch.Tensor, dtype_name: Any, tensor_bytes: Any
) -> Snapshot:
    """``snap`` with tensor ``name`` of file ``path`` replaced by ``rows`` (the file's other
    tensors kept as stored: no chunk read)."""
    stored = load_safetensors(ctx.graph, snap[path].oid, path)
    dtype = cast(DType, lookup(dtype_name(rows.dtype)))
    raw = tensor_bytes(rows.contiguous())
    ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool)
    ids = dict(stored.manifest_ids)
    ids[name] = ingestor.tensor(name, dtype, tuple(rows.shape), len(raw), lambda o, n: raw[o : o + n])
    specs = [(t.name, t.dtype, t.shape) for t in stored.layout.tensors]
    specs = [(n, dtype, tuple(rows.shape)) if n == name else (n, d, s) for n, d, s in specs]
    header = build_header(specs, stored.layout.metadata)
    return snap | {path: Entry("safetensors", ingestor.safetensors_tree(header, ids), snap[path].mode)}


def template_only(
    ctx: Context, spec: TokenizerSpec, model_dir: str, inputs: Sequence[Input], donor: str, output: Snapshot
) -> Snapshot:
    """``chat_template`` without a tokenizer source: the donor's tokenizer saved again with the
    template (mergekit's fallback when it copies the tokenizer), the rows left as they are
    (``auto`` reads every input's template)."""
    from mgit.merge import tokenizer as tk

    assert spec.chat_template is not None
    toks = {i.name: load_input(ctx, i, model_dir) for i in inputs if spec.chat_template == "auto" or i.name == donor}
    template = tk.chat_template(spec.chat_template, list(toks.values()))
    with ctx.writing():
        return output_files(ctx, output, model_dir, tk.saved_files(toks[donor].tokenizer, template), None)


def prepare(
    ctx: Context,
    cfg: MergeConfig,
    model_dir: str,
    base_commit: str,
    reference: str | None,
    output: Snapshot,
    experts: Sequence[str],
    snaps: Sequence[Snapshot],
    dtype: str | None,
) -> tuple[Snapshot, list[Snapshot], Snapshot, dict[str, Any]]:
    """A config's tokenizer keys applied: (the snapshot the plan takes as its base, the experts'
    snapshots, the merged model's starting snapshot, the record's ``tokenizer``). Inputs in
    mergekit's order: the config's models, then its base where they do not list it; the
    vocabulary starts from the base's tokenizer, else the first model's."""
    spec = cfg.tokenizer
    assert spec is not None
    by_name = dict(zip(experts, snaps, strict=True))
    if cfg.base is not None and cfg.base not in by_name:
        by_name[cfg.base] = ctx.snapshot(base_commit)
    if reference is None and cfg.base is None:
        raise BadInputError("a tokenizer merge into a base needs the base named in the config (base_model:)")
    order = list(dict.fromkeys([*(m.ref for m in cfg.models), *([cfg.base] if cfg.base else [])]))
    inputs = [Input(n, by_name[n]) for n in order]
    donor = cfg.base or order[0]
    plan_base = by_name[donor] if reference is None else snaps[0]
    if not spec.aligns:
        out = template_only(ctx, spec, model_dir, inputs, donor, output)
        return plan_base, list(snaps), out, {"source": None, "donor": donor, "chat_template": spec.chat_template}
    with ctx.writing():  # the aligned rows are chunks: stored, and sealed, under the lock
        aligned = align(ctx, spec, model_dir, inputs, donor, cfg.base, output, dtype)
    record = aligned.record | {"chat_template": spec.chat_template}
    base_name = donor if reference is None else experts[0]
    return aligned.snaps[base_name], [aligned.snaps[e] for e in experts], aligned.output, record
