"""What a push reads to move a ref: commits and trees only (no blob), stopping at what the remote's
existing refs reach."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.models import TINY, commit_model, llama_state_dict

from mgit import Repository
from mgit.remote.backend import BadRefError, object_key
from mgit.remote.local import DirectoryBackend

# -- item 7: a ref update reads commits and trees only, and stops at what existing refs reach ---


def _closure(repo: Repository, commit: str) -> tuple[set[str], set[str]]:
    """(tree ids, blob ids) under a commit's tree, from the local graph."""
    trees, blobs, pending = set(), set(), [repo.graph.read(commit).tree.decode()]
    while pending:
        oid = pending.pop()
        trees.add(oid)
        for e in repo.graph.read(oid).iteritems():
            if e.mode == 0o40000:
                pending.append(e.sha.decode())
            else:
                blobs.add(e.sha.decode())
    return trees, blobs


class CountingBackend(DirectoryBackend):
    """A directory remote that records the keys it was asked to read."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.read_keys: list[str] = []

    def get(self, key: str) -> bytes:
        self.read_keys.append(key)
        return super().get(key)


def test_a_ref_update_reads_no_blob_and_stops_at_what_existing_refs_reach(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "work")
    v1 = commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    repo.remote_add("origin", str(tmp_path / "remote"))
    repo.push()
    repo.checkout(create_branch="side")
    sd = llama_state_dict(TINY, seed=1)
    name = sorted(sd)[0]
    sd[name] = sd[name] + 1
    v2 = repo.commit_state_dict(sd, message="v2")
    repo.push(branch="side")
    assert DirectoryBackend(tmp_path / "remote").swap_ref("refs/heads/side", v2, None)
    (old_trees, old_blobs), (new_trees, new_blobs) = _closure(repo, v1), _closure(repo, v2)
    backend = CountingBackend(tmp_path / "remote")
    assert backend.swap_ref("refs/heads/x", None, v2)
    read = {k.rsplit("/", 1)[-1] for k in backend.read_keys}
    assert not read & (old_blobs | new_blobs)  # manifests are never inflated
    assert read & new_trees - old_trees  # the changed file's tree was read
    assert len(backend.read_keys) < len(new_trees) + len(old_trees) + 2 + len(new_blobs)
    backend.read_keys.clear()
    assert backend.swap_ref("refs/heads/x", v2, v2)  # its own old value bounds the walk
    assert not {k.rsplit("/", 1)[-1] for k in backend.read_keys} & (old_blobs | new_blobs)
    lost = sorted(new_blobs - old_blobs)[0]
    (tmp_path / "remote" / object_key(lost)).unlink()
    assert backend.swap_ref("refs/heads/x", v2, None)
    with pytest.raises(BadRefError, match=f"lacks object {lost[:12]}, which it reaches"):
        backend.swap_ref("refs/heads/y", None, v2)
