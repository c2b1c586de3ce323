"""A ``MODEL+LORA`` merge input (mergekit's model reference with a PEFT adapter): the model's
commit with the adapter applied (mgit.merge.lora), committed on top of it under refs/imports/,
so that the merge reads it like any input and its lineage reaches the model and, when the
adapter is a revision of this repository, the adapter's commit (its second parent).

The applied commit is keyed by the model's commit, its model directory and the BLAKE3 of the
adapter's two files: the same model and adapter are applied once and found again (mergekit's
``--lora-merge-cache``), however the adapter is named."""

from __future__ import annotations

import json
import posixpath
from pathlib import Path

import blake3

from mgit.context import Context
from mgit.errors import BadInputError, RevisionError
from mgit.graph import records
from mgit.graph.ids import object_id, ref_name
from mgit.graph.snapshot import Entry, Snapshot, write_snapshot
from mgit.merge.lora import CONFIG_FILE, WEIGHTS_FILE, LoraInput, apply_adapter, check_config, plan_adapter
from mgit.model.filetree import load_safetensors
from mgit.model.materialize import end_of, laid_out
from mgit.ops import inspect
from mgit.ops.paths import models
from mgit.ops.stage import ModelUpdate, ingest_state_dict

AdapterFiles = dict[str, bytes]  # CONFIG_FILE and WEIGHTS_FILE → their bytes


def split_lora(ref: str) -> tuple[str, str] | None:
    """``MODEL+LORA`` → (MODEL, LORA), as mergekit splits a model reference: at its one '+'
    (None for a name without one; more than one is refused, as mergekit refuses it)."""
    if "+" not in ref:
        return None
    parts = ref.split("+")
    if len(parts) != 2 or not all(parts):
        raise BadInputError(f"{ref!r} is not a revision, nor MODEL+LORA (one '+' between two names)")
    return parts[0], parts[1]


def apply_lora(ctx: Context, name: str, model_commit: str, adapter_ref: str, model_dir: str | None) -> LoraInput:
    """The commit holding ``model_commit``'s model with the adapter ``adapter_ref`` (a revision of
    this repository, ``REV:DIR`` for one in a directory of it, or a directory on disk) applied;
    made once per model and adapter content, then found under refs/imports/lora/."""
    snap = ctx.snapshot(model_commit)
    model_dir = _model_dir(snap, model_dir, name)
    source, adapter_commit, files = _adapter_files(ctx, adapter_ref)
    digests = {f: blake3.blake3(data).hexdigest() for f, data in sorted(files.items())}
    key = blake3.blake3(json.dumps([model_commit, model_dir, digests]).encode()).hexdigest()
    ref = ref_name(f"refs/imports/lora/{model_commit[:12]}-{key[:16]}".encode())
    found = ctx.graph.repo.refs.as_dict().get(ref)
    if found is not None:
        commit = found.decode()
    else:
        with ctx.writing():
            tree = _applied_tree(ctx, model_commit, snap, model_dir, files, name)
            parents = [model_commit] + ([adapter_commit] if adapter_commit else [])
            who = ctx.identity()
            commit = ctx.graph.put_commit(tree, parents, f"apply LoRA {adapter_ref} to {model_commit[:12]}", who, who)
            ctx.graph.repo.refs[ref] = object_id(commit.encode())
    return LoraInput(name=name, commit=commit, model=model_commit, model_dir=model_dir, adapter=source, blake3=digests)


def _model_dir(snap: Snapshot, model_dir: str | None, name: str) -> str:
    """The model the adapter applies to: the merge's model directory, else the only one."""
    found = models(snap)
    if model_dir is not None and model_dir in found:
        return model_dir
    if len(found) != 1:
        held = "no safetensors model" if not found else f"several models ({', '.join(m or '.' for m in found)})"
        raise BadInputError(f"{name}: the model's revision holds {held}; a LoRA applies to one (the base's --model)")
    return next(iter(found))


def _adapter_files(ctx: Context, ref: str) -> tuple[dict[str, str], str | None, AdapterFiles]:
    """The adapter's source as recorded (``{"commit", "dir"}`` or ``{"path"}``), its commit (None
    for a directory) and its files: a path that exists wins when written as one (``./``, ``/``,
    ``~``), else a revision (``REV`` or ``REV:DIR``), else a directory of that name."""
    path = Path(ref).expanduser()
    if ref.startswith(("/", "./", "../", "~")) and path.is_dir():
        return {"path": str(path.resolve())}, None, _directory_files(path.resolve())
    rev, _, sub = ref.partition(":")
    try:
        commit = ctx.refs.resolve(rev)
    except RevisionError:
        if not path.is_dir():
            raise RevisionError(
                f"unknown LoRA adapter {ref!r}: not a revision of this repository nor a directory"
            ) from None
        return {"path": str(path.resolve())}, None, _directory_files(path.resolve())
    snap = ctx.snapshot(commit)
    where = _adapter_dir(snap, sub.strip("/"), ref)
    files = {}
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        entry = snap.get(posixpath.join(where, name))
        if entry is None:
            raise BadInputError(f"LoRA adapter {ref}: no {name} in {where or 'its root'}{_BIN_HINT}")
        files[name] = _entry_bytes(ctx, entry, posixpath.join(where, name))
    return {"commit": commit, "dir": where}, commit, files


_BIN_HINT = " (an adapter saved as .bin: save it again with safe_serialization=True)"


def _adapter_dir(snap: Snapshot, sub: str, ref: str) -> str:
    """The directory of a revision that holds the adapter: ``sub`` if given, else the only one."""
    dirs = sorted({posixpath.dirname(p) for p in snap if posixpath.basename(p) == CONFIG_FILE})
    if sub:
        if sub not in dirs:
            raise BadInputError(f"LoRA adapter {ref}: no {CONFIG_FILE} in {sub}")
        return sub
    if len(dirs) != 1:
        if not dirs:
            raise BadInputError(f"LoRA adapter {ref}: the revision holds no {CONFIG_FILE}")
        raise BadInputError(
            f"LoRA adapter {ref}: several adapters ({', '.join(d or '.' for d in dirs)}); name one as REV:DIR"
        )
    return dirs[0]


def _directory_files(path: Path) -> AdapterFiles:
    files = {}
    for name in (CONFIG_FILE, WEIGHTS_FILE):
        try:
            files[name] = (path / name).read_bytes()
        except OSError as exc:
            raise BadInputError(f"LoRA adapter {path}: cannot read {name}: {exc.strerror}{_BIN_HINT}") from None
    return files


def _entry_bytes(ctx: Context, entry: Entry, rel: str) -> bytes:
    """A committed file's bytes: a blob's, or a chunked or safetensors file's put together."""
    if entry.kind == "blob":
        return ctx.graph.blob(entry.oid)
    lead, placed = laid_out(ctx.graph, entry, rel)
    buf = bytearray(end_of(lead, placed))
    buf[: len(lead)] = lead
    for at, cid, size in placed:
        buf[at : at + size] = ctx.store.get(cid)
    return bytes(buf)


def _applied_tree(ctx: Context, commit: str, snap: Snapshot, model_dir: str, files: AdapterFiles, name: str) -> str:
    """The tree of ``snap`` with the adapter's changed tensors written into their files (delta
    encoded against the model's own; every other file and tensor kept as it is); the lock held."""
    from safetensors import SafetensorError
    from safetensors.torch import load

    try:
        config = json.loads(files[CONFIG_FILE])
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BadInputError(f"{name}: {CONFIG_FILE} is not valid JSON: {exc}") from None
    check_config(config, name)
    try:
        adapter = load(files[WEIGHTS_FILE])
    except (SafetensorError, ValueError) as exc:
        raise BadInputError(f"{name}: {WEIGHTS_FILE} is not a safetensors file: {exc}") from None
    shapes: dict[str, tuple[int, ...]] = {}
    for path in models(snap)[model_dir]:
        stored = load_safetensors(ctx.graph, snap[path].oid, path)
        shapes |= {n: tuple(m.shape) for n, m in stored.manifests.items()}
    plan = plan_adapter(config, {n: tuple(t.shape) for n, t in adapter.items()}, shapes, name)
    weights = inspect.state_dict(ctx, commit, plan.changed, str(ctx.root / model_dir))
    changed = apply_adapter(plan, weights, adapter)
    out, stats = ingest_state_dict(ctx, changed, dict(snap), ModelUpdate(model_dir, [], False, None), None)
    ctx.store.seal()
    return write_snapshot(ctx.graph, out, records.stats_entries(ctx.graph, stats))
