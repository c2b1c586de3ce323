"""The file trees of the object graph: a safetensors file's tree written from its header and
manifest ids, and read back (header and manifests), or a chunked file's manifest."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from mgit.errors import BadInputError, CorruptObjectError
from mgit.graph.names import CHUNKED_ENTRY, HEADER_ENTRY, decode_tensor_name, encode_tensor_name, is_reserved
from mgit.graph.objects import MODE_FILE, Graph
from mgit.graph.snapshot import Snapshot
from mgit.model.manifest import FileManifest, TensorManifest
from mgit.model.safetensors_file import SafetensorsLayout, parse_header


@dataclass(frozen=True)
class StoredSafetensors:
    """A committed safetensors file: its layout (from the verbatim header) and manifests."""

    layout: SafetensorsLayout
    manifests: dict[str, TensorManifest]
    manifest_ids: dict[str, str]

    @property
    def file_size(self) -> int:
        return self.layout.file_size


def put_safetensors_tree(graph: Graph, header: bytes, manifest_ids: dict[str, str]) -> str:
    """The tree of a safetensors file (docs/format.md §6.2): its verbatim header blob and one
    manifest blob per tensor, by encoded name; returns the tree's id."""
    entries = [(HEADER_ENTRY, MODE_FILE, graph.put_blob(header))]
    entries += [(encode_tensor_name(n), MODE_FILE, oid) for n, oid in manifest_ids.items()]
    return graph.put_tree(entries)


def load_safetensors(
    graph: Graph, oid: str, path: str = "", parsed: dict[str, TensorManifest] | None = None
) -> StoredSafetensors:
    """A stored safetensors file's layout and manifests. ``parsed`` (manifest blob id → manifest)
    is shared by a caller loading many versions of one model (a merge's base and K experts: the
    tensors an expert left as they were have the base's very blob), so each blob is read and
    parsed once; it gains what this call parses."""
    header = None
    known = parsed if parsed is not None else {}
    manifests: dict[str, TensorManifest] = {}
    ids: dict[str, str] = {}
    for name, _, blob in graph.tree(oid):
        if name == HEADER_ENTRY:
            header = graph.blob(blob)
        elif not is_reserved(name):
            tensor = decode_tensor_name(name)
            manifest = known.get(blob)
            if manifest is None:
                what = f"the manifest {blob[:12]} of tensor {tensor!r} in {path or oid}"
                manifest = known[blob] = TensorManifest.from_bytes(graph.blob(blob), what)
            manifests[tensor] = manifest
            ids[tensor] = blob
    if header is None:
        raise CorruptObjectError(f"{path or oid}: stored safetensors tree has no header; run `mgit fsck`")
    size = len(header) + sum(m.nbytes for m in manifests.values())
    try:
        layout = parse_header(header, size, path or oid)
    except BadInputError as exc:
        raise CorruptObjectError(f"stored header does not match its manifests: {exc}") from None
    if set(layout.by_name()) != set(manifests):
        raise CorruptObjectError(f"{path or oid}: stored header and manifests name different tensors; run `mgit fsck`")
    for t in layout.tensors:
        m = manifests[t.name]
        if (m.dtype, m.shape, m.nbytes) != (t.dtype.name, t.shape, t.nbytes):
            raise CorruptObjectError(f"{path or oid}: manifest of tensor {t.name!r} disagrees with the header")
    return StoredSafetensors(layout, manifests, ids)


def load_chunked(graph: Graph, oid: str, path: str = "") -> FileManifest:
    """A stored large non-tensor file's manifest (checked whole: mgit.model.manifest)."""
    what = path or f"chunked file tree {oid[:12]}"
    for name, _, blob in graph.tree(oid):
        if name == CHUNKED_ENTRY:
            return FileManifest.from_bytes(graph.blob(blob), f"the manifest {blob[:12]} of {what}")
    raise CorruptObjectError(f"{what} has no manifest; run `mgit fsck`")


def chunked_parents(graph: Graph, snap: Snapshot) -> Callable[[str], FileManifest | None]:
    """Path → the manifest of the large non-tensor file at that path in ``snap`` (a file of
    another kind, or none: None), for storing its next version as deltas against it."""

    def lookup(rel: str) -> FileManifest | None:
        entry = snap.get(rel)
        return load_chunked(graph, entry.oid) if entry is not None and entry.kind == "chunked" else None

    return lookup
