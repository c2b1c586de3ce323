"""A killed process, a full disk, a corrupted chunk: clear errors, nothing lost."""

from __future__ import annotations

import errno
import os
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch
from helpers.models import frozen_finetune, llama_state_dict, tree_hashes, write_model
from helpers.run import run_mgit

from mgit import Repository, progress
from mgit.cli import main

KILL_AFTER = textwrap.dedent(
    """
    import os, signal, sys
    from mgit import Repository
    from mgit.store import chunkstore
    from mgit.model import materialize

    count = [0]
    def tick():
        count[0] += 1
        if count[0] == int(sys.argv[3]):
            os.kill(os.getpid(), signal.SIGKILL)

    put, get = chunkstore.ChunkStore.put, chunkstore.ChunkStore.get
    def slow_put(self, *a, **k):
        r = put(self, *a, **k); tick(); return r
    def slow_get(self, *a, **k):
        r = get(self, *a, **k); tick(); return r
    chunkstore.ChunkStore.put, chunkstore.ChunkStore.get = slow_put, slow_get
    repo = Repository(sys.argv[1])
    if sys.argv[2] == "add":
        repo.add(["model"])
    else:
        repo.checkout(sys.argv[2])
    """
)


def killed(root, action: str, after: int) -> None:
    proc = subprocess.run([sys.executable, "-c", KILL_AFTER, str(root), action, str(after)], capture_output=True)
    assert proc.returncode == -9, proc.stderr.decode()


def big_llama() -> dict:
    return llama_state_dict(llama_spec(), seed=5)


def llama_spec():
    from helpers.models import LlamaSpec

    return LlamaSpec(layers=6, hidden=256, intermediate=704, vocab=4000)


@pytest.fixture
def committed(repo):
    sd = big_llama()
    write_model(repo.root / "model", sd)
    repo.add(["model"])
    head = repo.commit("base")
    return repo, sd, head


def test_add_killed_midway_leaves_the_repository_consistent(committed):
    repo, sd, head = committed
    index_before = (repo.git_dir / "mgit-index.json").read_bytes()
    write_model(repo.root / "model", frozen_finetune(sd, set()))
    killed(repo.root, "add", after=5)
    assert (repo.git_dir / "mgit-index.json").read_bytes() == index_before
    assert repo.refs.head() == head
    assert [f.path for f in repo.status().unstaged] == ["model/model.safetensors"]
    repo.add(["model"])  # the killed writer's lock is gone; the work is redone
    repo.commit("sft")
    files = tree_hashes(repo.root)
    shutil.rmtree(repo.root / "model")
    repo.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root) == files


def test_checkout_killed_midway_never_leaves_a_half_written_file(committed):
    repo, sd, head = committed
    base_files = tree_hashes(repo.root)
    repo.checkout(create_branch="sft")
    write_model(repo.root / "model", frozen_finetune(sd, set()))
    repo.add(["model"])
    repo.commit("sft")
    sft_files = tree_hashes(repo.root)
    killed(repo.root, "main", after=3)
    after_kill = {p: h for p, h in tree_hashes(repo.root).items() if ".mgit-tmp-" not in p}
    assert after_kill == sft_files  # the rename never happened
    assert repo.status().untracked == []  # leftover temporary files are not user files
    repo.checkout("main")
    assert tree_hashes(repo.root) == base_files  # and the temporary file is cleaned up


def test_full_disk_gives_one_line_and_changes_nothing(committed, monkeypatch, capsys):
    repo, sd, head = committed
    index_before = (repo.git_dir / "mgit-index.json").read_bytes()
    write_model(repo.root / "model", frozen_finetune(sd, set()))
    from mgit.store.chunkstore import ChunkStore

    def full(self, raw, group, cid=None):
        raise OSError(errno.ENOSPC, "No space left on device", str(self.root))

    monkeypatch.setattr(ChunkStore, "put", full)
    monkeypatch.chdir(repo.root)
    monkeypatch.setattr(progress, "QUIET", progress.QUIET)  # main's -q sets it for the process
    assert main(["-q", "add", "model"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "no space left on device" in err[0] and "Traceback" not in err[0]
    assert (repo.git_dir / "mgit-index.json").read_bytes() == index_before
    assert repo.refs.head() == head


def test_corrupted_chunk_is_named_on_checkout(committed):
    repo, sd, head = committed
    name = "model.layers.2.mlp.up_proj.weight"
    manifest_chunk = None
    from mgit.model.filetree import load_safetensors

    snap = repo.snapshot()
    stored = load_safetensors(repo.graph, snap["model/model.safetensors"].oid)
    manifest_chunk = stored.manifests[name].chunks[0].id
    loc = repo.store.location(manifest_chunk)
    path = loc.pack
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.length - 10] ^= 0x01
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))
    (repo.root / "model" / "model.safetensors").unlink()
    proc = run_mgit("checkout", "HEAD", "--", "model", cwd=repo.root)
    assert proc.returncode == 1
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and name in lines[0] and "corrupt" in lines[0]
    assert not (repo.root / "model" / "model.safetensors").exists()
    with pytest.raises(Exception, match=name):
        Repository(repo.root).state_dict(names=[name])
    assert torch.equal(repo.state_dict(names=["lm_head.weight"])["lm_head.weight"], sd["lm_head.weight"])


def _damage_chunk_of(repo: Repository, tensor: str) -> str:
    """Flip a byte inside the stored record of the first chunk of ``tensor``; returns its id."""
    from mgit.model.filetree import load_safetensors

    stored = load_safetensors(repo.graph, repo.snapshot()["model/model.safetensors"].oid)
    cid = stored.manifests[tensor].chunks[0].id
    loc = repo.store.location(cid)
    data = bytearray(loc.pack.read_bytes())
    data[loc.offset + loc.length - 10] ^= 0x01
    os.chmod(loc.pack, 0o644)
    loc.pack.write_bytes(bytes(data))
    return cid


def test_fsck_repair_recovers_a_damaged_chunk_from_the_working_tree(committed):
    repo, sd, _ = committed
    files = tree_hashes(repo.root)
    cid = _damage_chunk_of(repo, "model.layers.2.mlp.up_proj.weight")
    damaged = Repository(repo.root)
    assert any(cid[:12] in p for p in damaged.fsck())
    report = damaged.fsck_repair()
    assert cid in report.dropped and report.from_worktree >= 1 and report.missing == {}
    fresh = Repository(repo.root)
    assert fresh.fsck() == []
    (repo.root / "model" / "model.safetensors").unlink()
    fresh.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root) == files


def test_fsck_repair_fetches_from_a_remote_or_names_what_is_lost(committed, tmp_path):
    repo, sd, _ = committed
    repo.remote_add("backup", str(tmp_path / "backup"))
    repo.push("backup")
    cid = _damage_chunk_of(repo, "lm_head.weight")
    shutil.rmtree(repo.root / "model")  # the working tree cannot help
    report = Repository(repo.root).fsck_repair()
    assert report.from_remotes == {"backup": 1} and report.missing == {}
    assert Repository(repo.root).fsck() == []
    # without the remote, the chunk is reported lost, naming the tensor
    again = Repository(repo.root)  # (the repair replaced the packs the first object had open)
    cid = _damage_chunk_of(again, "lm_head.weight")
    again.remote_remove("backup")
    proc = run_mgit("fsck", "--repair", cwd=repo.root)
    assert proc.returncode == 1 and "still missing" in proc.stderr and "lm_head.weight" in proc.stderr
    assert cid[:12] in proc.stderr and "Traceback" not in proc.stderr
