"""A damaged chunk is reported in one line naming the chunk and what it is of (the tensor and
its file, or the file), by every command that reads it: the store names the chunk, the code
that knows what it reads names that. Pinned here so that the naming stays where it is known."""

from __future__ import annotations

import os
import shutil

import pytest
import torch
from helpers.damage import flip_last_byte
from helpers.models import commit_model, llama_state_dict, touch_later, write_model

from mgit.errors import CorruptObjectError
from mgit.model.filetree import load_chunked, load_safetensors
from mgit.repo import Repository

FILE = "model/model.safetensors"
BIG = "model/big.bin"  # a large non-tensor file: stored as content-defined chunks
T = "model.layers.0.self_attn.q_proj.weight"  # one element changed: a delta of the base's chunk
U = "model.layers.0.mlp.up_proj.weight"  # changed throughout, large enough to be sketched
CORRUPT = "is corrupt (fails verification); run `mgit fsck`"


@pytest.fixture(scope="module")
def pristine(tmp_path_factory) -> tuple[str, dict]:
    """main: a small bf16 model and a large opaque file; e1: one element of T changed (its chunk a
    delta of main's), U changed and the opaque file edited. main checked out."""
    root = tmp_path_factory.mktemp("owner") / "work"
    sd = llama_state_dict(seed=5)
    with Repository.init(root) as repo:
        (root / "model").mkdir()
        big = bytearray(os.urandom(6 * 2**20))
        (root / BIG).write_bytes(big)
        commit_model(repo, sd, "base")
        repo.checkout(create_branch="e1")
        tuned = dict(sd)
        tuned[T] = sd[T].clone()
        tuned[T][0, 0] += 1
        tuned[U] = (sd[U].float() + 0.01 * torch.randn(sd[U].shape, generator=torch.Generator().manual_seed(1))).to(
            torch.bfloat16
        )
        big[100:110] = bytes(10)
        (root / BIG).write_bytes(big)
        commit_model(repo, tuned, "tuned")
        repo.checkout("main")
    return str(root), tuned


@pytest.fixture
def damaged(pristine, tmp_path) -> tuple[Repository, str, dict]:
    """A copy of the pristine repository with main's chunk of T damaged (e1's is a delta of it); its id."""
    root = tmp_path / "work"
    shutil.copytree(pristine[0], root, symlinks=True)
    repo = Repository(root)
    cid = load_safetensors(repo.graph, repo.snapshot("main")[FILE].oid).manifests[T].chunks[0].id
    flip_last_byte(repo.store, cid)
    yield repo, cid, pristine[1]
    repo.close()


def _message(call) -> str:
    with pytest.raises(CorruptObjectError) as caught:
        call()
    return str(caught.value)


@pytest.mark.parametrize("in_place", ["false", "true"])
def test_checkout_names_the_tensor_and_its_file(damaged, in_place):
    repo, cid, _ = damaged
    repo.config_set("checkout.inPlace", in_place)
    got = _message(lambda: repo.checkout("e1"))
    assert got.startswith(f"chunk {cid[:12]} of tensor '{T}' in {FILE} {CORRUPT}"), got


def test_reading_tensors_names_the_tensor_and_its_file(damaged):
    repo, cid, _ = damaged
    got = _message(lambda: repo.state_dict("e1", names=[T]))
    assert got == f"chunk {cid[:12]} of tensor '{T}' in {FILE} {CORRUPT}"


@pytest.mark.parametrize("method", ["linear", "ties"])  # chunk by chunk; whole tensors, decided per expert
def test_merge_names_the_tensor_and_its_file(damaged, method):
    repo, cid, _ = damaged
    params = {"weight": 0.5} if method == "linear" else {"weight": 0.5, "density": 0.5}
    got = _message(lambda: repo.merge(["e1"], method, **params))
    assert got == f"chunk {cid[:12]} of tensor '{T}' in {FILE} {CORRUPT}"


def test_diff_names_the_tensor_and_its_file(damaged):
    repo, cid, _ = damaged
    got = _message(lambda: repo.diff("main", "e1"))
    assert got == f"chunk {cid[:12]} of tensor '{T}' in {FILE} {CORRUPT}"


def test_sketch_names_the_tensor(damaged):
    repo, _, _ = damaged
    cid = load_safetensors(repo.graph, repo.snapshot("main")[FILE].oid).manifests[U].chunks[0].id
    flip_last_byte(repo.store, cid)
    got = _message(lambda: repo.sketch("e1", against="main", model="model"))
    assert got == f"chunk {cid[:12]} of tensor '{U}' {CORRUPT}"


def test_add_names_the_tensor_whose_parent_chunk_it_reads(damaged):
    repo, cid, tuned = damaged
    changed = dict(tuned)
    changed[T] = tuned[T].clone()
    changed[T][1, 1] += 1
    write_model(repo.root / "model", changed)
    touch_later(repo.root / FILE)
    got = _message(lambda: repo.add(["model"]))
    assert got == f"chunk {cid[:12]} of tensor '{T}' {CORRUPT}"


def test_a_large_file_is_named_by_checkout_and_add(damaged):
    repo, _, _ = damaged
    chunks = load_chunked(repo.graph, repo.snapshot("main")[BIG].oid).chunks
    flip_last_byte(repo.store, chunks[0].id)
    got = _message(lambda: repo.checkout("e1", paths=[BIG], force=True))
    assert got.startswith(f"chunk {chunks[0].id[:12]} of {BIG} {CORRUPT}"), got
    data = bytearray((repo.root / BIG).read_bytes())
    data[200:210] = bytes(10)
    (repo.root / BIG).write_bytes(data)
    touch_later(repo.root / BIG)
    got = _message(lambda: repo.add([BIG]))
    assert got == f"chunk {chunks[0].id[:12]} of {BIG} {CORRUPT}"
