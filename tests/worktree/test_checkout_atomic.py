"""A checkout reads and verifies every chunk it needs, into temporary files no reader looks at,
before the first working file changes: one that meets a corrupt chunk (or a full disk) stops
with every working file, the index and HEAD as they were, removes its temporaries and says
that nothing changed. (A kill at any point: tests/ops/test_crash_points.py.)"""

from __future__ import annotations

import errno
import os

import numpy as np
import pytest
import torch
from helpers.cli import invoke
from helpers.models import commit_model, llama_state_dict, tree_hashes

from mgit.model import materialize, placing
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

    def garbled(src, dst, src_at, dst_at, size, dest, source=None):
        n = real_copy(src, dst, src_at, dst_at, size, dest, source)
        os.pwrite(dst, b"\x01", dst_at)  # what landed is not the chunk
        return n

    monkeypatch.setattr(materialize, "copy_range", garbled)
    repo.checkout("main")
    monkeypatch.undo()
    assert len(decoded) > len(CHANGED)  # every chunk copied failed its check: decoded instead
    assert repo.status().clean
    with Repository(repo.root) as fresh:
        assert fresh.fsck() == []


def _open_temporaries() -> list[str]:
    """This process's file descriptors open on a checkout's temporary file."""
    found = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue
        if TMP_MARK in target:
            found.append(target)
    return found


@pytest.mark.parametrize("how", ["replace", "patch"])
def test_a_file_that_fails_to_go_into_place_leaves_no_temporary(lora, monkeypatch, how):
    """The rename (EACCES) or the in-place copy (EIO) of the first file fails: its temporary
    and its descriptor go with the others', and the next command finishes the checkout."""
    repo = lora
    if how == "patch":
        repo.config_set("checkout.inPlace", "true")

    def refused(*args, **kwargs):
        raise OSError(errno.EACCES if how == "replace" else errno.EIO, "refused", str(repo.root / SHARD1))

    monkeypatch.setattr(placing, "move_into_place" if how == "replace" else "copy_range", refused)
    with pytest.raises(OSError, match="refused"):
        repo.checkout("lora")
    monkeypatch.undo()
    assert _temporaries(repo.root) == [] and _open_temporaries() == []
    root = repo.root
    repo.close()
    finished = invoke("status", cwd=root, check=True)
    assert "finishing the interrupted checkout of lora" in finished.stderr
    with Repository(root) as again:
        assert again.refs.current_branch() == "lora" and again.status().clean and again.fsck() == []


def test_a_restored_path_that_fails_to_go_into_place_leaves_no_temporary(tmp_path, monkeypatch):
    """/tmp/rv/leak.py: `checkout HEAD -- a.bin` whose rename is refused left a 6 MB temporary."""
    repo = Repository.init(tmp_path / "w")
    path = repo.root / "a.bin"
    path.write_bytes(os.urandom(3_000_000))
    repo.add(["a.bin"])
    repo.commit("1")
    path.unlink()

    def refused(tmp, dest):
        raise OSError(errno.EACCES, "Permission denied", str(dest))

    monkeypatch.setattr(placing, "move_into_place", refused)
    with pytest.raises(OSError):
        repo.checkout("HEAD", ["a.bin"])
    monkeypatch.undo()
    assert _temporaries(repo.root) == [] and _open_temporaries() == []
    assert not (repo.git_dir / "journal.json").exists()
    repo.checkout("HEAD", ["a.bin"])
    assert repo.status().clean
    repo.close()


@pytest.mark.parametrize("code", [524, errno.EIO])  # ENOTSUPP (NFS and others), a FUSE file system's EIO
def test_a_kernel_copy_refused_for_any_reason_but_space_copies_otherwise(lora, monkeypatch, code):
    repo = lora

    def refused(*args):
        raise OSError(code, "refused")

    monkeypatch.setattr(os, "copy_file_range", refused)
    repo.checkout("lora")
    monkeypatch.undo()
    assert repo.status().clean and repo.fsck() == []
    assert tree_hashes(repo.root) == _fresh(repo, "lora")


def test_a_working_file_unreadable_where_a_chunk_is_copied_from_is_read_from_the_store(lora, monkeypatch):
    repo = lora

    def unreadable(src, dst, src_at, dst_at, size, dest, source=None):
        raise OSError(errno.EIO, "Input/output error", str(source))

    monkeypatch.setattr(materialize, "copy_range", unreadable)
    repo.checkout("lora")
    monkeypatch.undo()
    assert repo.status().clean
    assert tree_hashes(repo.root) == _fresh(repo, "lora")


def test_a_full_disk_met_by_the_kernel_copy_leaves_every_working_file_as_it_was(lora, monkeypatch):
    repo = lora
    before, head = tree_hashes(repo.root), repo.refs.head()

    def full(*args):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "copy_file_range", full)
    with pytest.raises(OSError) as caught:
        repo.checkout("lora")
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC and caught.value.filename.startswith(str(repo.root / "model"))
    assert tree_hashes(repo.root) == before and repo.refs.head() == head
    assert _temporaries(repo.root) == [] and not (repo.git_dir / "journal.json").exists()


def _fresh(repo: Repository, rev: str) -> dict[str, str]:
    """The working files as a checkout of ``rev`` from the store writes them, in a new clone."""
    other = Repository.clone(str(repo.root), repo.root.parent / f"fresh-{rev}")
    other.checkout(rev)
    hashes = tree_hashes(other.root)
    other.close()
    return hashes


class _Statvfs:
    def __init__(self, free: int):
        self.f_bavail, self.f_frsize = free // 4096, 4096


def test_new_files_that_cannot_fit_beside_the_old_are_refused_before_any_write(lora, monkeypatch):
    """Every changed file is prepared before the first old one goes: a switch of two shards
    needs room for both new files at once. Short of it, one line says so (and how to need
    less) before anything is written."""
    repo = lora
    before, head = tree_hashes(repo.root), repo.refs.head()
    need = sum((repo.root / p).stat().st_size for p in (SHARD1, SHARD2))
    monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs(need - 4096))
    root = repo.root
    repo.close()
    got = invoke("checkout", "lora", cwd=root)
    assert got.returncode == 1
    lines = got.stderr.strip().splitlines()
    assert len(lines) == 1 and "mgit config checkout.inPlace true" in lines[0], got.stderr
    assert "no working file was changed" in lines[0]
    assert tree_hashes(root) == before and _temporaries(root) == []
    assert not (root / ".mgit" / "journal.json").exists()
    with Repository(root) as again:
        assert again.refs.head() == head and again.refs.current_branch() == "main"
        monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs(need + 4096))
        again.checkout("lora")
        assert again.refs.current_branch() == "lora"
        monkeypatch.setattr(os, "statvfs", lambda path: _Statvfs(0))
        again.config_set("checkout.inPlace", "true")  # opted in, files patched need less: not refused
        assert again.checkout("main").patched == [SHARD1, SHARD2]


def test_a_failed_recovery_does_not_claim_that_no_working_file_was_changed(lora, monkeypatch):
    """A checkout interrupted after its first file went into place; its recovery then meets a
    corrupt chunk of the second: the warning must not say that nothing changed."""
    repo = lora
    real, calls = placing.move_into_place, []

    def interrupted(tmp, dest):
        calls.append(dest)
        if len(calls) == 2:
            raise KeyboardInterrupt
        real(tmp, dest)

    monkeypatch.setattr(placing, "move_into_place", interrupted)
    with pytest.raises(KeyboardInterrupt):
        repo.checkout("lora")
    monkeypatch.undo()
    assert (repo.git_dir / "journal.json").exists()
    _corrupt(repo, "lora", SHARD2, CHANGED[SHARD2])
    root = repo.root
    repo.close()
    got = invoke("status", cwd=root)
    assert "could not finish the interrupted checkout of lora" in got.stderr, got.stderr
    assert "no working file was changed" not in got.stderr


@pytest.mark.parametrize("in_place", [None, "true"])
def test_a_chunked_file_switched_with_its_old_version_in_place_is_byte_exact(tmp_path, monkeypatch, in_place):
    """A large non-tensor file (content-defined chunks) in five versions (inserted, overwritten,
    deleted and rotated bytes), switched between with the old version in the working tree: the
    unchanged chunks are copied from it (opted in, a small overwrite is patched) and every
    version comes out byte for byte (/tmp/rv/sw.py)."""
    repo = Repository.init(tmp_path / "w")
    if in_place is not None:
        repo.config_set("checkout.inPlace", in_place)
    v0 = np.random.default_rng(0).integers(0, 256, 9_000_000, dtype=np.uint8).tobytes()
    versions = {
        "main": v0,
        "ins": v0[:100] + b"INS" * 7 + v0[100:],
        "ovr": v0[:5_000_000] + os.urandom(5000) + v0[5_005_000:],
        "del": v0[:3_000_000] + v0[3_300_000:],
        "shift": v0[4_000_000:] + v0[:4_000_000],
    }
    path = repo.root / "m.gguf"
    for name, data in versions.items():
        if name != "main":
            repo.checkout("main")
            repo.checkout(create_branch=name)
        path.write_bytes(data)
        repo.add(["m.gguf"])
        repo.commit(name)
    real, copied = materialize.copy_range, []

    def counted(*args):
        n = real(*args)
        copied.append(n)
        return n

    monkeypatch.setattr(materialize, "copy_range", counted)
    patched = []
    for name in ["main", "ins", "ovr", "del", "shift", "main", "ovr", "main", "shift", "ins"]:
        patched += repo.checkout(name).patched
        assert path.read_bytes() == versions[name], name
    assert sum(copied) > len(v0)  # chunks came from the old version, not only from the store
    assert patched == ([] if in_place is None else ["m.gguf", "m.gguf"])  # main <-> ovr
    assert repo.status().clean and repo.fsck() == []
    repo.close()
