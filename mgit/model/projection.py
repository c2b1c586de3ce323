"""Projections: a safetensors file tree restricted to some of its tensors, and back.

A sparse checkout writes a *projection* of each committed safetensors file: a valid file
tree of its own (a new header for the subset, the same manifest blobs) describing exactly
the bytes on disk. The full tree stays in the index, so a commit needs no change; when the
working file is staged, :func:`combine` puts the tensors left out back beside it.
"""

from __future__ import annotations

from collections.abc import Callable

from mgit.graph.names import HEADER_ENTRY, encode_tensor_name, is_reserved
from mgit.graph.objects import MODE_FILE, Graph
from mgit.graph.snapshot import Entry
from mgit.model.filetree import StoredSafetensors, load_safetensors
from mgit.model.safetensors_file import build_header


def _tree(graph: Graph, header: bytes, manifest_ids: dict[str, str]) -> Entry:
    entries = [(HEADER_ENTRY, MODE_FILE, graph.put_blob(header))]
    entries += [(encode_tensor_name(n), MODE_FILE, oid) for n, oid in manifest_ids.items()]
    return Entry("safetensors", graph.put_tree(entries))


def project(graph: Graph, entry: Entry, keep: Callable[[str], bool], rel: str = "") -> Entry:
    """``entry`` restricted to the tensors ``keep`` selects, in their data order with the
    file's metadata; ``entry`` itself when every tensor is kept. The same entry and selection
    always give the same tree, so projections compare by id."""
    stored = load_safetensors(graph, entry.oid, rel)
    chosen = [t for t in stored.layout.tensors if keep(t.name)]
    if len(chosen) == len(stored.layout.tensors):
        return entry
    header = build_header([(t.name, t.dtype, t.shape) for t in chosen], stored.layout.metadata)
    return _tree(graph, header, {t.name: stored.manifest_ids[t.name] for t in chosen})


def tensor_count(graph: Graph, oid: str) -> int:
    """Tensors in a safetensors file tree (its manifests), without parsing them."""
    return sum(1 for name, _, _ in graph.tree(oid) if not is_reserved(name))


def _same_layout(full: StoredSafetensors, working: StoredSafetensors) -> bool:
    """Does every working tensor keep its name, dtype and shape, with no new tensor and the
    same metadata? Then the full file's verbatim header still describes the combined file."""
    if working.layout.metadata != full.layout.metadata:
        return False
    old = full.layout.by_name()
    return all(
        t.name in old and (old[t.name].dtype, old[t.name].shape) == (t.dtype, t.shape) for t in working.layout.tensors
    )


def combine(graph: Graph, full: Entry, working: Entry, rel: str = "") -> Entry:
    """The full file once its sparse working file holds ``working``: the working file's
    tensors, and every other tensor of ``full`` unchanged. A tensor absent from the working
    file is never dropped — whether the checkout left it out, an interrupted checkout wrote
    another selection, or the user deleted it (``mgit rm`` or a full checkout removes
    tensors). The full header is kept when names, dtypes, shapes and metadata are; otherwise
    a new header lists the full file's tensors in their old order, then new ones."""
    f = load_safetensors(graph, full.oid, rel)
    w = load_safetensors(graph, working.oid, rel)
    ids = {n: oid for n, oid in f.manifest_ids.items() if n not in w.manifests} | w.manifest_ids
    if _same_layout(f, w):
        return _tree(graph, f.layout.header, {n: ids[n] for n in f.manifest_ids})
    new = w.layout.by_name()
    specs = [
        (t.name, *((new[t.name].dtype, new[t.name].shape) if t.name in new else (t.dtype, t.shape)))
        for t in f.layout.tensors
    ]
    specs += [(t.name, t.dtype, t.shape) for t in w.layout.tensors if t.name not in f.manifests]
    return _tree(graph, build_header(specs, w.layout.metadata), ids)
