"""Model diffs: exact numbers, no reads for unchanged tensors, statuses, views."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from helpers.cli import invoke
from helpers.models import commit_model, llama_state_dict, touch_later, write_model
from safetensors.torch import save_file

from mgit.errors import BadInputError, RevisionError


def expected(a: torch.Tensor, b: torch.Tensor) -> dict:
    x = a.double().numpy().ravel()
    y = b.double().numpy().ravel()
    d = y - x
    return {
        "delta_norm": math.sqrt(float(d @ d)),
        "relative_change": math.sqrt(float(d @ d)) / math.sqrt(float(x @ x)),
        "cosine": float(x @ y) / math.sqrt(float(x @ x) * float(y @ y)),
        "max_abs_delta": float(np.abs(d).max()),
    }


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_known_deltas_give_exact_numbers(repo, dtype):
    g = torch.Generator().manual_seed(0)
    big = torch.randn(3000, 700, generator=g).to(dtype)  # several chunks; only some change
    small = torch.randn(64, 32, generator=g).to(dtype)
    a = {"big": big, "small": small, "same": torch.ones(10, dtype=dtype)}
    commit_model(repo, a, "a")
    b = dict(a)
    big2 = big.clone()
    big2[2000:2100] += torch.randn(100, 700, generator=g).to(dtype)  # inside one chunk
    b["big"] = big2
    b["small"] = (small.float() * 1.5 + 0.25).to(dtype)
    commit_model(repo, b, "b")
    result = repo.diff("HEAD~1", "HEAD")
    by_name = {t.name: t for t in result.tensors}
    assert by_name["same"].status == "unchanged"
    for name in ("big", "small"):
        t = by_name[name]
        assert t.status == "changed"
        for key, value in expected(a[name], b[name]).items():
            # unchanged chunks count with the norm their manifest records: summed in float32
            # for 16-bit floats (docs/format.md §8.2), within a few 1e-6 of the exact one
            rel = 1e-9 if dtype == torch.float32 else 1e-5
            assert math.isclose(getattr(t, key), value, rel_tol=rel, abs_tol=1e-12), (name, key)
    assert by_name["big"].chunks_changed == 1 < by_name["big"].chunks_total


def test_identical_models_read_no_chunk_data(repo):
    sd = llama_state_dict()
    commit_model(repo, sd, "a")
    (repo.root / "notes.txt").write_text("only a text file changes\n")
    repo.add(["notes.txt"])
    repo.commit("b")
    before = repo.store.reads.chunks
    result = repo.diff("HEAD~1", "HEAD")
    assert result.changed == [] and repo.store.reads.chunks == before
    assert [f.path for f in result.files] == ["notes.txt"]
    assert "+only a text file changes" in result.files[0].text


def test_stat_reads_no_tensor_data(repo):
    sd = llama_state_dict()
    commit_model(repo, sd, "a")
    b = dict(sd)
    b["lm_head.weight"] = sd["lm_head.weight"] * 2
    commit_model(repo, b, "b")
    before = repo.store.reads.chunks
    result = repo.diff("HEAD~1", "HEAD", numeric=False)
    assert [t.name for t in result.changed] == ["lm_head.weight"]
    assert result.changed[0].delta_norm is None
    assert repo.store.reads.chunks == before
    assert result.files[0].tensors_changed == 1


def test_shape_dtype_added_removed(repo):
    a = {"keep": torch.zeros(4), "grow": torch.zeros(4, 8), "cast": torch.zeros(4), "gone": torch.zeros(2)}
    commit_model(repo, a, "a")
    b = {
        "keep": torch.zeros(4),
        "grow": torch.zeros(5, 8),
        "cast": torch.zeros(4, dtype=torch.float16),
        "new": torch.ones(3),
    }
    commit_model(repo, b, "b")
    status = {t.name: t.status for t in repo.diff("HEAD~1", "HEAD").tensors}
    assert status == {
        "keep": "unchanged",
        "grow": "shape-changed",
        "cast": "dtype-changed",
        "gone": "removed",
        "new": "added",
    }


def test_a_dtype_change_shows_its_numeric_error(repo):
    """fp32 → bf16 (issue 39): the rounding error in the numeric columns, both sides widened to
    float64, in the table and in --json, not empty columns; committed and in the working tree."""
    g = torch.Generator().manual_seed(4)
    a = {"w": torch.randn(3000, 700, generator=g), "bias": torch.randn(64, generator=g)}  # w: several chunks
    commit_model(repo, a, "fp32")
    b = {k: v.to(torch.bfloat16) for k, v in a.items()}
    write_model(repo.root / "model", b)
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("bf16")
    committed, worktree = repo.diff("HEAD~1", "HEAD").changed, repo.diff("HEAD~1").changed  # HEAD~1 vs the files
    assert len(committed) == len(worktree) == 2
    for t in [*committed, *worktree]:
        assert t.status == "dtype-changed" and (t.dtype_a, t.dtype_b) == ("F32", "BF16")
        for key, value in expected(a[t.name], b[t.name]).items():
            assert math.isclose(getattr(t, key), value, rel_tol=1e-9), (t.name, key)
        assert 0 < t.relative_change < 1e-2  # bf16 keeps 8 bits of mantissa
    table = invoke("diff", "HEAD~1", "HEAD", cwd=repo.root, check=True).stdout
    row = next(line for line in table.splitlines() if line.startswith("w "))
    assert "dtype-changed" in row and format(expected(a["w"], b["w"])["max_abs_delta"], ".3g") in row
    doc = json.loads(invoke("diff", "HEAD~1", "HEAD", "--json", cwd=repo.root, check=True).stdout)
    (w,) = [t for t in doc["tensors"] if t["name"] == "w"]
    want = expected(a["w"], b["w"])["relative_change"]
    assert doc["schema"] == "mgit.diff/1" and math.isclose(w["relative_change"], want, rel_tol=1e-9)


def test_tensor_moved_between_shards(repo):
    sd = llama_state_dict()
    commit_model(repo, sd, "two shards", shards=2)
    shutil.rmtree(repo.root / "model")
    commit_model(repo, sd, "three shards", shards=3)
    diff = repo.diff("HEAD~1", "HEAD")
    statuses = {t.status for t in diff.tensors}
    assert statuses <= {"moved", "unchanged"} and "moved" in statuses
    assert not [t for t in diff.tensors if t.status in ("added", "removed")]
    assert repo.store.reads.chunks == 0


def test_working_tree_and_staged_diffs(repo):
    sd = llama_state_dict()
    commit_model(repo, sd, "a")
    b = dict(sd)
    b["model.norm.weight"] = sd["model.norm.weight"] * 3
    write_model(repo.root / "model", b, config={"model_type": "llama", "hidden_size": 128})
    touch_later(repo.root / "model" / "model.safetensors")
    work = repo.diff()
    (t,) = work.changed
    assert t.name == "model.norm.weight" and math.isclose(t.relative_change, 2.0, rel_tol=1e-12)
    config = next(f for f in work.files if f.path == "model/config.json")
    assert '+{"model_type": "llama", "hidden_size": 128}' in config.text
    assert repo.diff(staged=True).changed == []
    repo.add(["model"])
    (staged,) = repo.diff(staged=True).changed
    assert staged.name == "model.norm.weight"
    assert len(repo.diff().changed) == 1  # the working tree is still compared with HEAD


def test_patterns_and_errors(repo):
    commit_model(repo, llama_state_dict(), "a")
    commit_model(repo, llama_state_dict(seed=1), "b")
    only = repo.diff("HEAD~1", "HEAD", patterns=["model.layers.1.mlp.*"])
    assert {t.name for t in only.tensors} == {f"model.layers.1.mlp.{p}_proj.weight" for p in ("gate", "up", "down")}
    with pytest.raises(BadInputError, match="no tensor matches"):
        repo.diff("HEAD~1", "HEAD", patterns=["nothing.*"])
    with pytest.raises(RevisionError):
        repo.diff("nope", "HEAD")
    with pytest.raises(BadInputError, match="no model"):
        repo.diff("HEAD~1", "HEAD", model="elsewhere")


def test_cli_views_json_and_plot(repo, tmp_path):
    sd = llama_state_dict()
    commit_model(repo, sd, "a")
    b = {k: (v.float() * (1.01 if ".layers.2." in k else 1.0)).to(v.dtype) for k, v in sd.items()}
    commit_model(repo, b, "b")
    table = invoke("diff", "HEAD~1", "HEAD", cwd=repo.root, check=True).stdout
    assert "model.layers.2.mlp.up_proj.weight" in table and "‖Δ‖/‖A‖" in table
    stat = invoke("diff", "HEAD~1", "HEAD", "--stat", cwd=repo.root, check=True).stdout
    assert "model/model.safetensors | modified" in stat
    layers = invoke("diff", "HEAD~1", "HEAD", "--by-layer", cwd=repo.root, check=True).stdout
    assert "█" in layers and "mlp" in layers
    doc = json.loads(invoke("diff", "HEAD~1", "HEAD", "--json", cwd=repo.root, check=True).stdout)
    assert doc["schema"] == "mgit.diff/1" and len(doc["tensors"]) == len(sd)
    changed = [t for t in doc["tensors"] if t["status"] == "changed"]
    assert changed and all(".layers.2." in t["name"] for t in changed)
    png = tmp_path / "change.png"
    invoke("diff", "HEAD~1", "HEAD", "--plot", str(png), cwd=repo.root, check=True)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and data[12:16] == b"IHDR" and len(data) > 1000
    bad = invoke("diff", "HEAD~1", "nope", cwd=repo.root)
    assert bad.returncode == 1 and bad.stderr.startswith("error: unknown revision")
    bad = invoke("diff", "-k", "zzz*", cwd=repo.root)
    assert bad.returncode == 2 and "no tensor matches" in bad.stderr


def test_non_float_and_sharded_working_tree(repo):
    a = {"ids": torch.arange(100, dtype=torch.int64), "mask": torch.ones(7, dtype=torch.bool)}
    save_file(a, repo.root / "m.safetensors")
    repo.add(["m.safetensors"])
    repo.commit("ints")
    b = {"ids": torch.arange(100, dtype=torch.int64) * 2, "mask": torch.ones(7, dtype=torch.bool)}
    save_file(b, repo.root / "m.safetensors")
    touch_later(repo.root / "m.safetensors")
    (t,) = repo.diff().changed
    assert t.name == "ids" and math.isclose(t.delta_norm, math.sqrt(sum(i * i for i in range(100))), rel_tol=1e-12)


def test_clean_working_tree_is_not_rehashed(repo, monkeypatch):
    import time

    import mgit.diff.sources as sources

    write_model(repo.root / "model", llama_state_dict())
    repo.add(["model"])
    repo.commit("a")
    time.sleep(2.1)  # past the racy window
    repo.status()  # refresh the stat cache

    def no_hashing(*args, **kwargs):
        raise AssertionError("hashed a file the stat cache vouches for")

    monkeypatch.setattr(sources, "scan_tensor_chunks", no_hashing)
    result = repo.diff()
    assert result.changed == [] and result.files == []


def test_a_fine_tune_diff_decodes_each_parent_chunk_once(repo):
    """The fine-tune's changed chunks are deltas of the parent's: each parent chunk is decoded once
    and handed to the delta's decoding, whichever side of the diff it is on."""
    from helpers.models import frozen_finetune

    base = llama_state_dict()
    commit_model(repo, base, "base")
    commit_model(repo, frozen_finetune(base, frozen_layers={0, 1}, seed=9), "tuned")
    for a, b in (("HEAD~1", "HEAD"), ("HEAD", "HEAD~1")):
        before = repo.store.reads.chunks
        result = repo.diff(a, b)
        changed = sum(t.chunks_changed for t in result.changed)
        assert changed > 0 and repo.store.reads.chunks - before == 2 * changed
