"""Opted in (``checkout.inPlace = true``), a checkout that changes a small part of a clean
working file patches it in place, writing only the chunks that differ; the bytes are those a
fresh checkout writes, and a patch killed half way is finished by the next command. By
default the file is replaced (a reader never sees a mix: tests/worktree/test_checkout_atomic.py)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
import torch
from helpers.models import commit_model, llama_state_dict, sha256, touch_later, uneven_finetune
from helpers.run import run_mgit

from mgit.errors import BadInputError
from mgit.model import materialize
from mgit.ops import checkout
from mgit.repo import Repository

MODEL = "model/model.safetensors"
CHANGED = ("model.layers.0.self_attn.q_proj.weight", "model.layers.1.mlp.up_proj.weight")


@pytest.fixture
def two(repo):
    """main: a bf16 base; lora: two of its projections changed (a LoRA merged into them); full:
    most tensors changed. main checked out."""
    base = llama_state_dict(seed=3)
    commit_model(repo, base, "base")
    repo.checkout(create_branch="lora")
    lora = dict(base)
    for name in CHANGED:
        lora[name] = (base[name].float() + 0.01 * torch.ones_like(base[name], dtype=torch.float32)).to(torch.bfloat16)
    commit_model(repo, lora, "lora")
    repo.checkout("main")
    repo.checkout(create_branch="full")
    commit_model(repo, uneven_finetune(base, seed=9), "full")
    repo.checkout("main")
    return repo


@pytest.fixture
def in_place(two):
    """``two``, opted in to patching working files in place."""
    two.config_set("checkout.inPlace", "true")
    return two


@pytest.fixture
def writes(monkeypatch):
    """Bytes written into files by chunk (pwrite), in this process."""
    seen: list[int] = []
    real = materialize.pwrite_all

    def counted(fd, data, offset, dest):
        seen.append(len(data))
        return real(fd, data, offset, dest)

    monkeypatch.setattr(materialize, "pwrite_all", counted)
    return seen


def _fresh_sha(repo: Repository, rev: str) -> str:
    """The file as a checkout from the store writes it (no working file to patch)."""
    shutil.rmtree(repo.root / "model")
    repo.checkout(rev, force=True)
    return sha256(repo.root / MODEL)


def _changed_bytes(base_repo: Repository) -> int:
    sd = base_repo.state_dict("lora")
    return sum(sd[n].numel() * sd[n].element_size() for n in CHANGED)


def test_switching_to_a_few_changed_tensors_patches_only_them(in_place, writes):
    repo = in_place
    inode = os.stat(repo.root / MODEL).st_ino
    res = repo.checkout("lora")
    assert res.patched == [MODEL] and MODEL in res.written
    assert os.stat(repo.root / MODEL).st_ino == inode  # the same file, patched
    assert sum(writes) == _changed_bytes(repo)  # nothing else was written
    assert repo.status().clean
    patched = sha256(repo.root / MODEL)
    assert _fresh_sha(repo, "lora") == patched
    back = repo.checkout("main")  # and back: the same two tensors again
    assert back.patched == [MODEL]
    assert sha256(repo.root / MODEL) == _fresh_sha(repo, "main")


def test_a_file_mostly_changed_is_replaced(in_place, writes):
    repo = in_place
    inode = os.stat(repo.root / MODEL).st_ino
    res = repo.checkout("full")
    assert res.patched == []
    assert os.stat(repo.root / MODEL).st_ino != inode
    assert sha256(repo.root / MODEL) == _fresh_sha(repo, "full")


def test_a_dirty_file_forced_over_is_written_anew_not_patched(in_place):
    """Bytes changed in a tensor the switch leaves alone must not survive a --force checkout."""
    repo = in_place
    path = repo.root / MODEL
    data = bytearray(path.read_bytes())
    data[-10] ^= 0xFF  # the last tensor's bytes: not one of CHANGED
    path.write_bytes(bytes(data))
    touch_later(path)
    res = repo.checkout("lora", force=True)
    assert res.patched == []
    assert sha256(path) == _fresh_sha(repo, "lora")


@pytest.mark.parametrize("setting", [None, "false"])
def test_without_in_place_a_checkout_replaces_the_file(two, setting):
    """The default (no setting) and ``false``: a new file renamed into place, whatever changed."""
    repo = two
    if setting is not None:
        repo.config_set("checkout.inPlace", setting)
    inode = os.stat(repo.root / MODEL).st_ino
    res = repo.checkout("lora")
    assert res.patched == []
    assert os.stat(repo.root / MODEL).st_ino != inode
    assert repo.status().clean
    assert sha256(repo.root / MODEL) == _fresh_sha(repo, "lora")


def test_a_bad_in_place_setting_is_refused_before_any_write(in_place):
    repo = in_place
    repo.config_set("checkout.inPlace", "sometimes")
    before, head = sha256(repo.root / MODEL), repo.refs.head()
    with pytest.raises(BadInputError, match=r"checkout\.inPlace"):
        repo.checkout("lora")
    assert sha256(repo.root / MODEL) == before and repo.refs.head() == head
    assert not (repo.root / ".mgit" / "journal.json").exists()


def test_a_hard_linked_working_file_is_not_patched(in_place, tmp_path):
    """Another name for the file (a copy made with `cp -l`) keeps the old bytes."""
    repo = in_place
    other = tmp_path / "elsewhere.safetensors"
    before = sha256(repo.root / MODEL)
    os.link(repo.root / MODEL, other)
    res = repo.checkout("lora")
    assert res.patched == []
    assert sha256(other) == before
    assert sha256(repo.root / MODEL) != before


@pytest.mark.parametrize("point", ["write:1", "write:2"])
def test_a_patch_killed_half_way_is_finished_by_the_next_command(in_place, point):
    """SIGKILL before the first and the second patched chunk: the journal names the file, and
    the next command rewrites it, byte for byte."""
    repo = in_place
    root = repo.root
    repo.close()
    killed = run_mgit("checkout", "lora", cwd=root, env={"MGIT_CRASH_AT": point})
    assert killed.returncode == -9, killed.stderr
    assert (root / ".mgit" / "journal.json").is_file()
    status = run_mgit("status", cwd=root, check=True)
    assert "finishing the interrupted checkout" in status.stderr
    assert not (root / ".mgit" / "journal.json").exists()
    with Repository(root) as again:
        assert again.status().clean
        assert again.refs.current_branch() == "lora"
        finished = sha256(root / MODEL)
        assert _fresh_sha(again, "lora") == finished
    assert run_mgit("fsck", cwd=root).returncode == 0


def test_checkout_json_names_the_patched_files(in_place):
    repo = in_place
    root = repo.root
    repo.close()
    out = run_mgit("checkout", "lora", "--json", cwd=root, check=True)
    doc = json.loads(out.stdout)
    assert doc["schema"] == "mgit.checkout/1"
    assert doc["patched"] == [MODEL] and MODEL in doc["written"]


def test_a_file_written_anew_is_not_renamed_over_the_old_one(two, renames):
    """ext4 writes a file out before a rename over another returns (auto_da_alloc), and the next
    fsync waits for it: ~2 s of a 2.2 GB branch switch. The old file goes first, as git's does."""
    repo = two
    repo.checkout("full")  # most tensors differ: the file is written anew, not patched
    assert [over for dst, over in renames if dst == str(repo.root / MODEL)] == [False]
    assert repo.status().clean
    written = sha256(repo.root / MODEL)
    shutil.rmtree(repo.root / "model")
    repo.checkout("full", force=True)
    assert sha256(repo.root / MODEL) == written


def test_a_file_written_to_after_it_was_found_clean_is_replaced_not_patched(in_place, monkeypatch):
    """Files are patched only once every file is prepared: an edit of the working file in
    between (its own inode, as an editor saving in place) must not end up mixed with the
    patch and recorded clean. The file is replaced by the checked-out version instead."""
    repo = in_place
    path = repo.root / MODEL
    real = checkout._make_visible

    def edited_meanwhile(*args, **kwargs):
        with open(path, "r+b") as f:  # the last tensor: one the switch leaves alone
            f.seek(-10, os.SEEK_END)
            byte = f.read(1)
            f.seek(-10, os.SEEK_END)
            f.write(bytes([byte[0] ^ 0xFF]))
        return real(*args, **kwargs)

    monkeypatch.setattr(checkout, "_make_visible", edited_meanwhile)
    res = repo.checkout("lora")
    monkeypatch.undo()
    assert res.patched == [] and res.written == [MODEL]
    assert repo.status().clean
    assert sha256(path) == _fresh_sha(repo, "lora")


def test_a_partial_clone_patches_with_chunks_it_fetches_while_preparing(two, tmp_path):
    """The chunks a patch writes are prepared in a temporary file first, so they need not be
    here beforehand: a partial clone fetches them then, and patches as a full clone does."""
    repo = two
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push("origin", "main")
    repo.push("origin", "lora")
    partial = Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "partial", partial=True)
    partial.config_set("checkout.inPlace", "true")
    inode = os.stat(partial.root / MODEL).st_ino
    res = partial.checkout("lora")
    assert res.patched == [MODEL] and os.stat(partial.root / MODEL).st_ino == inode
    assert partial.status().clean and partial.fsck() == []
    assert sha256(partial.root / MODEL) == _fresh_sha(repo, "lora")
    partial.close()
