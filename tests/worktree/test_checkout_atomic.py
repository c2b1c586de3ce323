"""A checkout reads and verifies every chunk it needs, into temporary files no reader looks at,
before the first working file changes: one that meets a corrupt chunk (or a full disk) stops
with every working file, the index and HEAD as they were, removes its temporaries and says
that nothing changed. (A kill at any point: tests/test_crash_points.py.)"""

from __future__ import annotations

import errno
import os

import pytest
import torch
from helpers.cli import invoke
from helpers.models import commit_model, llama_state_dict, tree_hashes

from mgit.model import materialize
from mgit.model.filetree import load_safetensors
from mgit.model.placing import TMP_MARK
from mgit.repo import Repository

SHARD1, SHARD2 = "model/model-00001-of-00002.safetensors", "model/model-00002-of-00002.safetensors"
# one tensor of each shard: a tenth of either file (an opted-in checkout would patch them in place)
CHANGED = {SHARD1: "model.layers.0.self_attn.q_proj.weight", SHARD2: "model.layers.3.mlp.up_proj.weight"}


@pytest.fixture
def lora(repo):
    """main: a two-shard bf16 model; lora: one tensor of each shard changed. main checked out."""
    base = llama_state_dict(seed=3)
    commit_model(repo, base, "base", shards=2)
    repo.checkout(create_branch="lora")
    tuned = dict(base)
    for name in CHANGED.values():
        tuned[name] = (base[name].float() + 0.01).to(torch.bfloat16)
    commit_model(repo, tuned, "lora", shards=2)
    repo.checkout("main")
    return repo


def _corrupt(repo: Repository, rev: str, path: str, tensor: str) -> str:
    """Flip a byte of the stored record of ``tensor``'s last chunk at ``rev``; its id."""
    stored = load_safetensors(repo.graph, repo.snapshot(rev)[path].oid)
    cid = stored.manifests[tensor].chunks[-1].id
    loc = repo.store.location(cid)
    with open(loc.pack, "r+b") as f:
        f.seek(loc.offset + loc.length - 1)
        last = f.read(1)
        f.seek(loc.offset + loc.length - 1)
        f.write(bytes([last[0] ^ 0xFF]))
    return cid


def _temporaries(root) -> list[str]:
    return [str(p) for p in root.rglob("*") if TMP_MARK in p.name]


@pytest.mark.parametrize("in_place", [None, "false", "true"])
def test_a_corrupt_chunk_in_the_last_file_leaves_every_working_file_as_it_was(lora, in_place):
    repo = lora
    if in_place is not None:
        repo.config_set("checkout.inPlace", in_place)
    before, head = tree_hashes(repo.root), repo.refs.head()
    cid = _corrupt(repo, "lora", SHARD2, CHANGED[SHARD2])  # the second file, written after the first
    root = repo.root
    repo.close()
    got = invoke("checkout", "lora", cwd=root)
    assert got.returncode == 1
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and cid[:12] in lines[0] and "no working file was changed" in lines[0], got.stderr
    assert tree_hashes(root) == before
    assert _temporaries(root) == [] and not (root / ".mgit" / "journal.json").exists()
    with Repository(root) as again:
        assert again.refs.head() == head and again.refs.current_branch() == "main"
        assert again.status().clean


def test_a_full_disk_while_preparing_leaves_every_working_file_as_it_was(lora, monkeypatch):
    """ENOSPC writing the second file's chunks: the first file was complete, but only out of sight."""
    repo = lora
    before, head = tree_hashes(repo.root), repo.refs.head()
    real = materialize.pwrite_all

    def full(fd, data, offset, dest):
        if dest is not None and str(dest).endswith(SHARD2.rsplit("/", 1)[1]):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(dest))
        return real(fd, data, offset, dest)

    monkeypatch.setattr(materialize, "pwrite_all", full)
    with pytest.raises(OSError) as caught:
        repo.checkout("lora")
    assert caught.value.errno == errno.ENOSPC
    monkeypatch.undo()
    assert tree_hashes(repo.root) == before and repo.refs.head() == head
    assert _temporaries(repo.root) == [] and not (repo.git_dir / "journal.json").exists()
    assert repo.status().clean
    repo.checkout("lora")  # space again: the checkout goes through
    assert repo.refs.current_branch() == "lora" and repo.status().clean


def test_unchanged_chunks_are_copied_from_the_old_file_and_checked_where_they_land(lora, monkeypatch):
    """A chunk copied from the working file that does not hash to its id where it landed (the
    file changed under the checkout) is written from the store instead."""
    repo = lora
    decoded: list[str] = []
    real_get = repo.store.get

    def counted(cid, *args, **kwargs):
        decoded.append(cid)
        return real_get(cid, *args, **kwargs)

    monkeypatch.setattr(repo.store, "get", counted)
    repo.checkout("lora")
    wanted = set()
    for path, tensor in CHANGED.items():
        stored = load_safetensors(repo.graph, repo.snapshot("lora")[path].oid)
        wanted |= {c.id for c in stored.manifests[tensor].chunks}
    assert set(decoded) == wanted  # only the changed tensors' chunks came from the store
    decoded.clear()
    real_copy = materialize.copy_range

    def garbled(src, dst, src_at, dst_at, size, dest):
        n = real_copy(src, dst, src_at, dst_at, size, dest)
        os.pwrite(dst, b"\x01", dst_at)  # what landed is not the chunk
        return n

    monkeypatch.setattr(materialize, "copy_range", garbled)
    repo.checkout("main")
    monkeypatch.undo()
    assert len(decoded) > len(CHANGED)  # every chunk copied failed its check: decoded instead
    assert repo.status().clean
    with Repository(repo.root) as fresh:
        assert fresh.fsck() == []
