"""Merge inputs: a revision, or a model directory on disk, imported as a root commit under
refs/imports/ so that a merge's parents and its lineage stay in the graph; either with a LoRA
adapter applied (``MODEL+LORA``, mgit.ops.merge_lora)."""

from __future__ import annotations

import posixpath
import re
from pathlib import Path

from mgit.context import Context
from mgit.errors import BadInputError, RevisionError
from mgit.graph.ids import object_id, ref_name
from mgit.graph.snapshot import Snapshot, validate_path, write_snapshot
from mgit.merge.lora import LoraInput
from mgit.model.ingest import Ingestor
from mgit.ops import merge_lora
from mgit.progress import byte_progress
from mgit.worktree.scan import walk


def merge_input(ctx: Context, ref: str, model_dir: str | None, loras: list[LoraInput] | None = None) -> str:
    """A merge input: a revision, or a model directory on disk imported as a root commit
    under refs/imports/ (so the merge's parents and lineage stay in the graph). A name that
    is neither, split at its '+' as mergekit splits ``MODEL+LORA``, is the model with the LoRA
    adapter applied: that commit is returned, and what was applied is added to ``loras``."""
    path = Path(ref).expanduser()
    if ref.startswith(("/", "./", "../", "~")) and path.is_dir():
        return import_directory(ctx, path.resolve(), model_dir or "model")
    try:
        return ctx.refs.resolve(ref)
    except RevisionError:
        if path.is_dir():
            return import_directory(ctx, path.resolve(), model_dir or "model")
        parts = merge_lora.split_lora(ref)
        if parts is None:
            refuse_hub_id(ref)
            raise
    model = merge_input(ctx, parts[0], model_dir)
    applied = merge_lora.apply_lora(ctx, ref, model, parts[1], model_dir)
    if loras is not None and applied not in loras:
        loras.append(applied)
    return applied.commit


HUB_ID = re.compile(r"[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?")


def refuse_hub_id(ref: str) -> None:
    """A name like a Hugging Face id (``org/name``, ``org/name@rev``) that is neither a revision
    here nor a directory: one line saying how to bring the model in (mgit downloads nothing)."""
    if HUB_ID.fullmatch(ref):
        raise BadInputError(
            f"{ref!r} looks like a Hugging Face model id, but it is neither a revision here nor a directory: "
            f"mgit downloads nothing; download it (hf download {ref.split('@')[0]} --local-dir DIR) and give DIR, "
            "or `mgit add` it and name the commit"
        )


def import_directory(ctx: Context, path: Path, model_dir: str) -> str:
    """The model directory at ``path`` as a root commit whose files lie under ``model_dir``."""
    with ctx.writing():
        files = walk(path)
        snap: Snapshot = {}
        with byte_progress("import", sum(st.st_size for st in files.values())) as bar:
            ingestor = Ingestor(ctx.graph, ctx.store, ctx.pool, bar)
            for rel in sorted(files):
                target = validate_path(posixpath.join(model_dir, rel) if model_dir else rel)
                snap[target] = ingestor.file(path / rel, target)
        ctx.store.seal()
        tree = write_snapshot(ctx.graph, snap)
        who = ctx.identity()
        commit = ctx.graph.put_commit(tree, [], f"import {path}", who, who)
        name = re.sub(r"[^A-Za-z0-9._-]+", "-", path.name).strip("-.") or "model"
        ctx.graph.repo.refs[ref_name(f"refs/imports/{name}-{tree[:8]}".encode())] = object_id(commit.encode())
        return commit
