"""Defects of staging and committing (issue 12): commits from memory leaving a stale working
tree, empty commits, .bin status/diff disagreeing, special and unreadable paths, files
rewritten during `add`, numpy warnings about NaN/Inf data."""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from helpers.cli import invoke
from helpers.models import (
    TINY,
    commit_model,
    frozen_finetune,
    llama_state_dict,
    sha256,
    touch_later,
    tree_hashes,
    write_model,
)
from helpers.run import run_mgit
from safetensors.torch import load_file, save_file

import mgit.model.ingest as ingest
import mgit.worktree.scan as scan
from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError, MgitError
from mgit.model.chunking import DEFAULT_CHUNK_BYTES

MODEL = "model/model.safetensors"


def _same(a: dict, b: dict) -> bool:
    return set(a) == set(b) and all(torch.equal(a[k], b[k]) for k in a)


# -- 1: commit_state_dict and the working tree --------------------------------------------


def test_commit_state_dict_on_the_checked_out_branch_updates_the_working_files(repo, llama):
    commit_model(repo, llama, "base")
    tuned = frozen_finetune(llama, {0})
    c = repo.commit_state_dict(tuned, model="model", message="step 1")
    assert repo.refs.head() == c
    assert repo.status().clean
    assert _same(load_file(repo.root / MODEL), tuned)
    written = sha256(repo.root / MODEL)
    repo.checkout("HEAD", ["model"])  # what a checkout writes: byte for byte the same file
    assert sha256(repo.root / MODEL) == written
    # a plain add + commit afterwards keeps the checkpoint
    (repo.root / "model" / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 65}))
    touch_later(repo.root / "model" / "config.json")
    repo.add(["model"])
    repo.commit("config")
    assert _same(repo.state_dict("HEAD"), tuned)
    assert repo.status().clean


def test_commit_state_dict_then_cli_add_and_commit_keeps_a_sharded_checkpoint(repo, llama):
    commit_model(repo, llama, "sharded base", shards=2)
    tuned = frozen_finetune(llama, {0, 1, 2})
    repo.commit_state_dict(tuned, model="model", message="tuned")
    assert repo.status().clean
    weight_map = json.loads((repo.root / "model" / "model.safetensors.index.json").read_text())["weight_map"]
    assert (
        weight_map
        == json.loads(repo.graph.blob(repo.snapshot()["model/model.safetensors.index.json"].oid))["weight_map"]
    )
    invoke("add", "model", cwd=repo.root, check=True)
    proc = invoke("commit", "-m", "plain commit", cwd=repo.root)
    assert proc.returncode != 0 and "nothing to commit" in proc.stderr  # nothing was stale
    (repo.root / "notes.txt").write_text("n")
    invoke("add", ".", cwd=repo.root, check=True)
    invoke("commit", "-m", "notes", cwd=repo.root, check=True)
    assert _same(repo.state_dict("HEAD"), tuned)


def test_commit_state_dict_on_another_branch_leaves_the_working_tree_alone(repo, llama):
    main = commit_model(repo, llama, "base")
    repo.create_branch("train")
    files = tree_hashes(repo.root)
    index = (repo.git_dir / "mgit-index.json").read_bytes()
    tuned = frozen_finetune(llama, {0})
    c = repo.commit_state_dict(tuned, model="model", message="step 1", branch="train")
    assert repo.branches() == {"main": main, "train": c}
    assert repo.refs.current_branch() == "main" and repo.refs.head() == main
    assert repo.graph.commit(c).parents == (main,)
    assert tree_hashes(repo.root) == files and (repo.git_dir / "mgit-index.json").read_bytes() == index
    assert repo.status().clean
    assert _same(repo.state_dict("train"), tuned) and _same(repo.state_dict("main"), llama)
    repo.checkout("train")
    assert _same(load_file(repo.root / MODEL), tuned) and repo.status().clean


def test_commit_state_dict_refuses_to_overwrite_uncommitted_changes(repo, llama):
    base = commit_model(repo, llama, "base")
    edited = dict(llama) | {"lm_head.weight": llama["lm_head.weight"] + 1}
    save_file(edited, repo.root / MODEL, metadata={"format": "pt"})
    touch_later(repo.root / MODEL)
    before = sha256(repo.root / MODEL)
    with pytest.raises(DirtyWorktreeError, match="model/model.safetensors"):
        repo.commit_state_dict(frozen_finetune(llama, {0}), model="model", message="step")
    assert repo.refs.head() == base and sha256(repo.root / MODEL) == before


def test_commit_state_dict_to_an_unknown_branch_is_refused(repo, llama):
    commit_model(repo, llama, "base")
    with pytest.raises(BadInputError, match="branch 'nope' not found"):
        repo.commit_state_dict(llama, model="model", message="x", branch="nope")


# -- 3: a commit of nothing ---------------------------------------------------------------


def test_commit_with_nothing_staged_after_a_tensor_change_is_refused(repo, llama):
    commit_model(repo, llama, "base")
    head = commit_model(repo, frozen_finetune(llama, {0}), "tuned")
    assert repo.commit_stats("HEAD")  # HEAD's tree holds a stats record a new commit would drop
    proc = invoke("commit", "-m", "again", cwd=repo.root)
    assert proc.returncode == 1 and "nothing to commit" in proc.stderr
    assert repo.refs.head() == head
    with pytest.raises(MgitError, match="nothing to commit"):
        repo.commit("again")
    invoke("commit", "--allow-empty", "-m", "empty on purpose", cwd=repo.root, check=True)
    assert repo.graph.commit(repo.refs.head()).parents == (head,)


# -- 6: status and diff agree on non-safetensors files --------------------------------------


def test_a_large_bin_file_status_and_diff_agree(repo):
    path = repo.root / "pytorch_model.bin"
    path.write_bytes(os.urandom(DEFAULT_CHUNK_BYTES + 1000))  # chunked, not a blob
    repo.add(["pytorch_model.bin"])
    repo.commit("bin")
    touch_later(path)  # stat-only change: neither reports it
    assert repo.status().clean
    assert invoke("diff", cwd=repo.root).stderr.startswith("no differences")
    with open(path, "r+b") as f:  # a real change: both report it
        f.seek(100)
        flipped = bytes([f.read(1)[0] ^ 0xFF])  # (the read moved on: write where it read)
        f.seek(100)
        f.write(flipped)
    touch_later(path)
    assert [f.path for f in repo.status().unstaged] == ["pytorch_model.bin"]
    proc = invoke("diff", cwd=repo.root)
    assert "no differences" not in proc.stderr and "pytorch_model.bin" in proc.stdout


def test_an_executable_bit_change_shows_in_status_and_diff(repo):
    path = repo.root / "tokenizer.bin"
    path.write_bytes(b"\x00\x01binary")
    repo.add(["tokenizer.bin"])
    repo.commit("small bin")
    path.chmod(0o755)
    assert [f.path for f in repo.status().unstaged] == ["tokenizer.bin"]
    proc = invoke("diff", cwd=repo.root)
    assert "old mode 100644, new mode 100755" in proc.stdout and "no differences" not in proc.stderr


# -- 22: FIFOs and other special files --------------------------------------------------------


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_adding_a_fifo_is_refused_by_name_without_blocking(repo, tmp_path):
    (repo.root / "d").mkdir()
    (repo.root / "d" / "a.txt").write_text("a")
    os.mkfifo(repo.root / "d" / "pipe")
    os.mkfifo(repo.root / "pipe")
    (repo.root / "link").symlink_to("pipe")
    env = {**os.environ}
    for target in ("pipe", "link"):
        proc = subprocess.run(
            [sys.executable, "-m", "mgit", "add", target], cwd=repo.root, capture_output=True, text=True, timeout=60
        )
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.strip().splitlines() == [
            f"error: cannot add {target}: not a regular file (a FIFO, socket or device); "
            "mgit tracks regular files and symlinks to them"
        ]
    # a directory holding one: its regular files are added, the FIFO is never opened
    proc = subprocess.run(
        [sys.executable, "-m", "mgit", "add", "d"], cwd=repo.root, capture_output=True, text=True, timeout=60, env=env
    )
    assert proc.returncode == 0, proc.stderr
    assert set(repo._index().entries) == {"d/a.txt"}


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this system")
def test_a_tracked_file_replaced_by_a_fifo_is_refused_and_stays_staged(repo):
    (repo.root / "d").mkdir()
    (repo.root / "d" / "a.txt").write_text("a")
    repo.add(["d"])
    (repo.root / "d" / "a.txt").unlink()
    os.mkfifo(repo.root / "d" / "a.txt")
    with pytest.raises(BadInputError, match="cannot add d/a.txt: not a regular file"):
        repo.add(["d"])
    assert set(repo._index().entries) == {"d/a.txt"}


# -- 23: a directory that cannot be listed ------------------------------------------------------


def _model_in_subdir(repo, llama) -> None:
    write_model(repo.root / "models" / "llama", llama)
    repo.add(["models"])
    repo.commit("base")


def _unlistable(monkeypatch, directory: Path) -> None:
    """Listing ``directory`` fails as a directory without read permission fails for a user who
    is not root (root reads any directory whatever its mode, and CI runs as root)."""
    real = os.listdir

    def listdir(path):
        if Path(path) == directory:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(scan.os, "listdir", listdir)


def test_an_unlistable_tracked_directory_is_an_error_not_a_deletion(repo, llama, monkeypatch):
    _model_in_subdir(repo, llama)
    index = (repo.git_dir / "mgit-index.json").read_bytes()
    _unlistable(monkeypatch, repo.root / "models" / "llama")
    with pytest.raises(BadInputError, match="cannot read models/llama: Permission denied"):
        repo.add(["models"])
    with pytest.raises(BadInputError, match="cannot read models/llama"):
        repo.add(["."])
    with pytest.raises(BadInputError, match="cannot read models/llama"):
        repo.status()
    assert (repo.git_dir / "mgit-index.json").read_bytes() == index


def test_an_unreadable_directory_is_named_by_the_cli(repo, llama, monkeypatch):
    _model_in_subdir(repo, llama)
    index = (repo.git_dir / "mgit-index.json").read_bytes()
    _unlistable(monkeypatch, repo.root / "models" / "llama")  # the CLI runs in this process
    proc = invoke("add", "models", cwd=repo.root)
    assert proc.returncode == 2 and proc.stderr.startswith("error: cannot read models/llama")
    assert (repo.git_dir / "mgit-index.json").read_bytes() == index


# -- 24: deeply nested headers ------------------------------------------------------------------


def _raw_safetensors(path: Path, header: bytes) -> None:
    path.write_bytes(struct.pack("<Q", len(header)) + header)


def test_a_deeply_nested_header_is_one_line_naming_the_file(repo):
    (repo.root / "m").mkdir()
    _raw_safetensors(repo.root / "m" / "model.safetensors", b"[" * 200_000 + b"]" * 200_000)
    proc = invoke("add", "m", cwd=repo.root)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "m/model.safetensors" in lines[0] and "nests JSON 200000 levels deep" in lines[0]
    assert "internal error" not in proc.stderr


# -- 30: a file rewritten while add reads it ------------------------------------------------------


def test_a_file_rewritten_during_add_is_refused_and_nothing_is_staged(repo, llama, monkeypatch):
    write_model(repo.root / "model", llama)
    path = repo.root / MODEL
    touch_later(path)
    tuned = frozen_finetune(llama, set(), scale=0.5)  # same names and shapes: same size, other bytes
    real, lock, done = ingest._file_reader, threading.Lock(), []

    def rewriting_reader(fd: int, base: int):
        read = real(fd, base)

        def read_then_rewrite(offset: int, size: int) -> bytes:
            data = read(offset, size)
            with lock:
                if not done:  # the trainer saves its next checkpoint in place mid-read
                    done.append(True)
                    new = repo.root / "next.tmp"
                    save_file(tuned, new, metadata={"format": "pt"})
                    with open(path, "r+b") as f:
                        f.write(new.read_bytes())
                    new.unlink()
            return data

        return read_then_rewrite

    monkeypatch.setattr(ingest, "_file_reader", rewriting_reader)
    with pytest.raises(BadInputError, match="model/model.safetensors changed while mgit was reading it"):
        repo.add(["model"])
    assert done and repo._index().entries == {}
    monkeypatch.setattr(ingest, "_file_reader", real)
    repo.add(["model"])  # once it is written, add takes it whole
    repo.commit("whole")
    assert _same(repo.state_dict("HEAD"), tuned)


# -- 33: NaN/Inf data prints no numpy warnings ----------------------------------------------------


def _special_values(dtype: torch.dtype, bits: torch.dtype, payloads: list[int]) -> torch.Tensor:
    t = torch.linspace(-2, 2, 4096).to(dtype)
    t[:3] = torch.tensor([float("nan"), float("inf"), float("-inf")])
    raw = t.view(bits)
    raw[3 : 3 + len(payloads)] = torch.tensor(payloads, dtype=torch.int64).to(bits)  # NaNs with payloads
    return raw.view(dtype).reshape(64, 64)


def _nan_model(shift: float) -> dict:
    sd = {
        "bf16": _special_values(torch.bfloat16, torch.int16, [0x7F81, 0x7FC1, -0x007F]),
        "fp16": _special_values(torch.float16, torch.int16, [0x7C01, 0x7E01, -0x03FF]),
        "fp32": _special_values(torch.float32, torch.int32, [0x7F800001, 0x7FC00001, -0x007FFFFF]),
    }
    for t in sd.values():
        t[10:20] += shift
    return sd


def test_adding_nan_and_inf_data_prints_no_numpy_warning(repo):
    for step, shift in enumerate((0.0, 1.0)):  # the second add computes deltas against the first
        write_model(repo.root / "model", _nan_model(shift))
        touch_later(repo.root / MODEL)
        proc = run_mgit("add", "model", cwd=repo.root, env={"PYTHONWARNINGS": "default"})
        assert proc.returncode == 0, proc.stderr
        assert "Warning" not in proc.stderr, proc.stderr
        invoke("commit", "-m", f"step {step}", cwd=repo.root, check=True)
    proc = run_mgit("diff", "HEAD~1", "HEAD", cwd=repo.root, env={"PYTHONWARNINGS": "default"})
    assert proc.returncode == 0 and "Warning" not in proc.stderr, proc.stderr


# -- item 3: an unreadable untracked directory is skipped with a warning ------------------------


def test_an_unreadable_untracked_directory_is_skipped_with_a_warning(repo: Repository, monkeypatch, capsys) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    (repo.root / "lost+found").mkdir()
    (repo.root / "lost+found" / "x").write_text("x")
    _unlistable(monkeypatch, repo.root / "lost+found")
    st = repo.status()
    assert not st.unstaged and not st.untracked
    repo.diff()
    repo.add(["."])
    assert not any(p.startswith("lost+found") for p in repo._index().entries)
    err = capsys.readouterr().err
    assert "warning: cannot read lost+found: Permission denied; skipped" in err
    assert all(line.startswith("warning: ") for line in err.splitlines())


def test_an_unreadable_tracked_directory_is_still_an_error(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    _unlistable(monkeypatch, repo.root / "model")
    with pytest.raises(BadInputError, match="cannot read model: Permission denied"):
        repo.status()
    with pytest.raises(BadInputError, match="cannot read model"):
        repo.add(["."])


def test_an_unreadable_directory_named_to_add_is_an_error(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    (repo.root / "cache").mkdir()
    _unlistable(monkeypatch, repo.root / "cache")
    with pytest.raises(BadInputError, match="cannot read cache"):
        repo.add(["cache"])
