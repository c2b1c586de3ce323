"""Opaque (non-tensor) files for tests: a GGUF-shaped file, committing one, reading its chunks
back, and committing a hand-made manifest (the file tests in tests/model/ share these)."""

from __future__ import annotations

import numpy as np

from helpers.models import touch_later
from mgit import Repository
from mgit.graph.names import CHUNKED_ENTRY
from mgit.graph.objects import MODE_FILE, MODE_TREE
from mgit.model.filetree import load_chunked
from mgit.model.manifest import FileManifest

NAME = "model.gguf"


def gguf_like(size: int, seed: int = 0) -> bytes:
    """A GGUF-shaped file: magic, a header of key/value text, then quantized blocks (random
    bytes compress no better than real 4-bit blocks do)."""
    header = b"GGUF\x03\x00\x00\x00" + b"general.architecture=llama;" * 40
    blocks = np.random.default_rng(seed).integers(0, 256, size - len(header), dtype=np.uint8)
    return header + blocks.tobytes()


def commit_file(repo: Repository, data: bytes, message: str, name: str = NAME):
    path = repo.root / name
    path.write_bytes(data)
    touch_later(path)
    result = repo.add([name])
    repo.commit(message)
    return result


def chunks_at(repo: Repository, rev: str, name: str = NAME) -> FileManifest:
    return load_chunked(repo.graph, repo.snapshot(rev)[name].oid)


def commit_manifest(repo: Repository, manifest: FileManifest, name: str, message: str) -> None:
    """Commit, on top of HEAD, a tree holding one chunked file with this manifest (§6.3)."""
    tree = repo.graph.put_tree([(CHUNKED_ENTRY, MODE_FILE, repo.graph.put_blob(manifest.to_bytes()))])
    root = repo.graph.put_tree([(name, MODE_TREE, tree)])
    who, head = repo.identity(), repo.refs.head()
    repo.refs.advance_head(head, repo.graph.put_commit(root, [head] if head else [], message, who, who), message)
