"""Repository round trips: byte-exact, deduplicated, switching both ways."""

from __future__ import annotations

import shutil
import struct
import subprocess
import sys
import time

import pytest
import torch
from helpers.models import (
    frozen_finetune,
    lora_merged,
    minilm_dir,
    sha256,
    touch_later,
    tree_hashes,
    vocab_extended,
    write_model,
)
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save_file

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError, LockedError, RevisionError


def store_bytes(repo: Repository) -> int:
    return sum(p.stat().st_size for p in (repo.git_dir / "chunks").rglob("*") if p.is_file())


def store_chunks(repo: Repository) -> set[str]:
    return repo.store.ids()


def raw_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()


ALL_DTYPES = [
    torch.float64,
    torch.float32,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.int16,
    torch.int8,
    torch.uint8,
    torch.bool,
    torch.float8_e4m3fn,
    torch.float8_e5m2,
    torch.uint16,
    torch.uint32,
    torch.uint64,
    torch.float8_e4m3fnuz,
    torch.float8_e5m2fnuz,
    torch.float8_e8m0fnu,
    torch.complex64,
]


def dtype_zoo() -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(7)
    sd = {}
    for dt in ALL_DTYPES:
        base = torch.randn(37, 29, generator=g) * 3
        name = str(dt).split(".")[-1]
        if dt == torch.bool:
            t = base > 0
        elif dt == torch.complex64:
            t = torch.complex(base, -base)
        elif dt == torch.float8_e8m0fnu:
            t = base.abs().to(dt)
        elif dt.is_floating_point:
            t = base.to(dt)
        else:
            t = base.abs().to(torch.int64).to(dt)
        sd[f"{name}.matrix"] = t
        sd[f"{name}.scalar"] = t[0, 0].clone()  # 0-d
        sd[f"{name}.empty"] = t[:0].clone()  # 0 rows
        sd[f"{name}.vector"] = t.reshape(-1)[:13].clone()
    big = torch.randn(3000, 1000, generator=g).to(torch.bfloat16)  # several 4 MiB chunks
    sd["big.multi_chunk"] = big
    sd["weird/name with spaces"] = torch.ones(2)
    sd[".leading.dot"] = torch.zeros(2)
    return sd


def test_every_dtype_and_shape_class_round_trips_byte_exact(repo):
    d = repo.root / "zoo"
    d.mkdir()
    save_file(dtype_zoo(), d / "zoo.safetensors", metadata={"format": "pt", "note": "ünïcode"})
    before = tree_hashes(repo.root)
    repo.add([d])
    repo.commit("zoo")
    shutil.rmtree(d)
    repo.checkout("HEAD", ["zoo"])
    assert tree_hashes(repo.root) == before
    sd = repo.state_dict()
    for name, t in dtype_zoo().items():
        assert sd[name].dtype == t.dtype and sd[name].shape == t.shape
        assert raw_bytes(sd[name]) == raw_bytes(t)


def test_sharded_model_and_config_round_trip(repo, llama):
    write_model(repo.root / "model", llama, shards=3)
    before = tree_hashes(repo.root)
    repo.add(["model"])
    c1 = repo.commit("base")
    assert set(repo.models()) == {"model"}
    assert len(repo.models()["model"]) == 3
    shutil.rmtree(repo.root / "model")
    assert [f.change for f in repo.status().unstaged] == ["deleted"] * 5
    repo.checkout(c1, ["model"])
    assert tree_hashes(repo.root) == before
    sd = repo.state_dict(model="model")
    assert set(sd) == set(llama) and all(torch.equal(sd[k], llama[k]) for k in llama)


def test_real_minilm_round_trips_byte_exact(repo):
    shutil.copytree(minilm_dir(), repo.root / "minilm")
    before = tree_hashes(repo.root)
    repo.add(["minilm"])
    repo.commit("real model")
    shutil.rmtree(repo.root / "minilm")
    repo.checkout("main", ["minilm"])
    assert tree_hashes(repo.root) == before
    assert repo.status().clean
    from safetensors.torch import load_file

    reference = load_file(minilm_dir() / "model.safetensors")
    sd = repo.state_dict()
    assert set(sd) == set(reference) and all(torch.equal(sd[k], reference[k]) for k in reference)


def test_readding_the_same_model_stores_almost_nothing(repo):
    shutil.copytree(minilm_dir(), repo.root / "a")
    repo.add(["a"])
    repo.commit("a")
    size = store_bytes(repo)
    shutil.copytree(minilm_dir(), repo.root / "b")
    res = repo.add(["b"])
    repo.commit("b, the same model again")
    model_size = sum(p.stat().st_size for p in (repo.root / "b").rglob("*") if p.is_file())
    assert res.stored_bytes == 0
    assert store_bytes(repo) - size < 0.01 * model_size


def test_frozen_layer_finetune_adds_only_changed_tensors(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    chunks_before = store_chunks(repo)
    tuned = frozen_finetune(llama, frozen_layers={0, 1})
    write_model(repo.root / "model", tuned)
    touch_later(repo.root / "model" / "model.safetensors")
    st = repo.status()
    changed = set(st.unstaged[0].tensors.changed)
    expected = {n for n in llama if not torch.equal(llama[n], tuned[n])}
    assert changed == expected and all(".layers.0." not in n and ".layers.1." not in n for n in changed)
    repo.add(["model"])
    repo.commit("sft")
    new_chunks = store_chunks(repo) - chunks_before
    assert len(new_chunks) == len(expected)  # every small tensor is one chunk


def test_vocab_extension_reuses_earlier_rows_chunks(repo):
    big = {"model.embed_tokens.weight": (torch.randn(20000, 256) * 0.02).to(torch.bfloat16)}
    write_model(repo.root / "m", big)
    repo.add(["m"])
    repo.commit("base")
    before = store_chunks(repo)
    write_model(repo.root / "m", vocab_extended(big, extra_rows=100))
    touch_later(repo.root / "m" / "model.safetensors")
    repo.add(["m"])
    repo.commit("vocab +100")
    # 20000 rows x 512 B = 9.8 MiB → chunks of 8192 rows; only the last chunk changes
    assert len(store_chunks(repo) - before) == 1


def test_lora_merge_changes_only_q_and_v(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    write_model(repo.root / "model", lora_merged(llama))
    touch_later(repo.root / "model" / "model.safetensors")
    changed = repo.status().unstaged[0].tensors.changed
    assert changed and all(n.endswith(("q_proj.weight", "v_proj.weight")) for n in changed)


def test_checkout_switches_both_ways_and_reads_only_changed_chunks(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    base_files = tree_hashes(repo.root)
    repo.checkout(create_branch="sft")
    tuned = frozen_finetune(llama, frozen_layers={0, 1, 2})
    write_model(repo.root / "model", tuned)
    (repo.root / "model" / "notes.txt").write_text("sft notes")
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("sft")
    sft_files = tree_hashes(repo.root)
    sft_contents = {raw_bytes(t) for t in tuned.values()}
    must_read = {raw_bytes(t) for t in llama.values()} - sft_contents

    res = repo.checkout("main")
    assert tree_hashes(repo.root) == base_files
    assert res.removed == ["model/notes.txt"]
    assert res.chunks_read == len(must_read)  # chunks the local file holds are copied from it
    assert repo.refs.current_branch() == "main"

    repo.checkout("sft")
    assert tree_hashes(repo.root) == sft_files
    assert repo.status().clean


def test_checkout_refuses_to_overwrite_uncommitted_changes(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    repo.checkout(create_branch="other")
    (repo.root / "model" / "config.json").write_text('{"changed": 1}')
    repo.add(["model"])
    repo.commit("other config")
    repo.checkout("main")
    (repo.root / "model" / "config.json").write_text('{"local": "edit"}')
    with pytest.raises(DirtyWorktreeError, match="model/config.json"):
        repo.checkout("other")
    assert (repo.root / "model" / "config.json").read_text() == '{"local": "edit"}'
    repo.checkout("other", force=True)
    assert (repo.root / "model" / "config.json").read_text() == '{"changed": 1}'


def test_restore_one_path_from_a_tag(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    repo.tag("v1")
    original = (repo.root / "model" / "config.json").read_text()
    (repo.root / "model" / "config.json").write_text("{}")
    repo.add(["model"])
    repo.commit("empty config")
    repo.checkout("v1", ["model/config.json"])
    assert (repo.root / "model" / "config.json").read_text() == original
    assert [f.path for f in repo.status().staged] == ["model/config.json"]


def test_status_reports_every_state(repo, llama):
    write_model(repo.root / "model", llama)
    (repo.root / "old.txt").write_text("old")
    repo.add(["."])
    repo.commit("base")
    (repo.root / "old.txt").unlink()
    (repo.root / "new.txt").write_text("new")
    (repo.root / "model" / "config.json").write_text('{"x": 2}')
    st = repo.status()
    assert {(f.path, f.change) for f in st.unstaged} == {("old.txt", "deleted"), ("model/config.json", "modified")}
    assert st.untracked == ["new.txt"]
    repo.add(["."])
    st = repo.status()
    assert {(f.path, f.change) for f in st.staged} == {
        ("old.txt", "deleted"),
        ("model/config.json", "modified"),
        ("new.txt", "added"),
    }
    assert not st.unstaged and not st.untracked


def test_status_uses_the_stat_cache(repo, llama, monkeypatch):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    time.sleep(2.1)  # past the racy window (RACY_NS)
    repo.status()  # re-hashes once, refreshes the stat cache
    import mgit.worktree.status as status_mod

    def boom(*a, **k):
        raise AssertionError("re-hashed a file the stat cache says is unchanged")

    monkeypatch.setattr(status_mod, "working_matches", boom)
    assert repo.status().clean


def test_mgitignore_keeps_files_out(repo, llama):
    write_model(repo.root / "ckpt", llama)
    (repo.root / "ckpt" / "optimizer.pt").write_bytes(b"\0" * 100)
    (repo.root / "ckpt" / "logs").mkdir()
    (repo.root / "ckpt" / "logs" / "a.log").write_text("x")
    (repo.root / ".mgitignore").write_text("*.pt\nlogs/\n")
    repo.add(["."])
    tracked = set(repo._index().entries)
    assert ".mgitignore" in tracked and "ckpt/model.safetensors" in tracked
    assert "ckpt/optimizer.pt" not in tracked and "ckpt/logs/a.log" not in tracked
    assert repo.status().untracked == []
    with pytest.raises(BadInputError, match="ignored"):
        repo.add(["ckpt/optimizer.pt"])


def test_symlinked_files_are_followed(repo, llama):
    blobs = repo.root.parent / "hf-cache" / "blobs"
    write_model(blobs, llama)
    snap = repo.root / "snapshot"
    snap.mkdir()
    for f in blobs.iterdir():
        (snap / f.name).symlink_to(f)
    repo.add(["snapshot"])
    repo.commit("from a cache snapshot")
    shutil.rmtree(snap)
    repo.checkout("HEAD", ["snapshot"])
    assert not (snap / "model.safetensors").is_symlink()
    assert sha256(snap / "model.safetensors") == sha256(blobs / "model.safetensors")


def test_rm_and_mirroring_deletions(repo, llama):
    write_model(repo.root / "model", llama, shards=2)
    repo.add(["model"])
    repo.commit("sharded")
    repo.rm(["model/model-00002-of-00002.safetensors"])
    assert not (repo.root / "model" / "model-00002-of-00002.safetensors").exists()
    assert [(f.path, f.change) for f in repo.status().staged] == [("model/model-00002-of-00002.safetensors", "deleted")]
    (repo.root / "model" / "config.json").unlink()
    res = repo.add(["model"])
    assert res.removed == ["model/config.json"]
    with pytest.raises(BadInputError, match="did not match"):
        repo.rm(["nothing-here"])


def test_revisions(repo, llama):
    write_model(repo.root / "m", llama)
    repo.add(["m"])
    c1 = repo.commit("one")
    (repo.root / "m" / "config.json").write_text("{}")
    repo.add(["m"])
    c2 = repo.commit("two")
    repo.tag("v2")
    assert repo.resolve("HEAD~1") == c1 == repo.resolve("v2^1") == repo.resolve(c2[:8] + "~1")
    assert repo.resolve(c2[:7]) == c2 == repo.resolve("main")
    for bad in ("nope", "HEAD~5", "HEAD^2", ""):
        with pytest.raises(RevisionError):
            repo.resolve(bad)
    res = repo.checkout("HEAD~1")
    assert res.detached and repo.refs.current_branch() is None
    assert [c.id for c in repo.log("main")] == [c2, c1]
    assert [c.id for c in repo.log("main", paths=["m/config.json"])] == [c2, c1]


def test_log_limits_to_a_path(repo, llama):
    write_model(repo.root / "a", llama)
    repo.add(["a"])
    c1 = repo.commit("a")
    (repo.root / "b.txt").write_text("b")
    repo.add(["b.txt"])
    c2 = repo.commit("b")
    assert [c.id for c in repo.log(paths=["a"])] == [c1]
    assert [c.id for c in repo.log(paths=["b.txt"])] == [c2]


def test_commit_state_dict_from_memory(repo, llama):
    c = repo.commit_state_dict(llama, model="model", message="from memory")
    assert repo.graph.commit(c).parents == ()
    sd = repo.state_dict(c, model="model")
    assert all(torch.equal(sd[k], llama[k]) for k in llama)
    assert not (repo.root / "model").exists()
    st = repo.status()
    assert st.clean and st.not_checked_out == ["model/model.safetensors"]
    tuned = frozen_finetune(llama, {0})
    before = store_chunks(repo)
    c2 = repo.commit_state_dict(tuned, model="model", message="step 2")
    changed = {n for n in llama if not torch.equal(llama[n], tuned[n])}
    assert len(store_chunks(repo) - before) == len(changed)
    assert repo.graph.commit(c2).parents == (c,)
    repo.checkout("HEAD", ["model"])
    from safetensors.torch import load_file

    on_disk = load_file(repo.root / "model" / "model.safetensors")
    assert all(torch.equal(on_disk[k], tuned[k]) for k in tuned)


def test_commit_state_dict_keeps_shards(repo, llama):
    write_model(repo.root / "model", llama, shards=2)
    repo.add(["model"])
    repo.commit("sharded base")
    files = repo.models()["model"]
    tuned = frozen_finetune(llama, {0, 1, 2})
    repo.commit_state_dict(tuned, model="model", message="tuned")
    assert repo.models()["model"] == files
    sd = repo.state_dict(model="model")
    assert all(torch.equal(sd[k], tuned[k]) for k in tuned)
    assert repo.status().staged == []  # the rewritten weight map is staged too: no commit reverts it
    repo.checkout("HEAD", ["model"])
    assert repo.status().clean


def test_state_dict_reads_only_requested_chunks(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    repo.commit("base")
    before = repo.store.reads.chunks
    sd = repo.state_dict(names=["model.layers.1.mlp.up_proj.weight"])
    assert list(sd) == ["model.layers.1.mlp.up_proj.weight"]
    assert repo.store.reads.chunks - before == 1
    with pytest.raises(BadInputError, match="not in this model"):
        repo.state_dict(names=["nope"])


def test_lock_refuses_a_second_writer_and_is_freed_when_the_holder_dies(repo):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from mgit import Repository; r = Repository(sys.argv[1]); r.lock.__enter__();"
            " print('locked', flush=True); time.sleep(60)",
            str(repo.root),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        (repo.root / "f.txt").write_text("x")
        with pytest.raises(LockedError, match=f"pid {holder.pid}"):
            repo.add(["f.txt"])
    finally:
        holder.kill()
        holder.wait()
    repo.add(["f.txt"])  # the dead holder's lock is gone by itself
    repo.commit("after the crash")


def test_killed_add_leaves_the_repository_consistent(repo, llama):
    write_model(repo.root / "model", llama)
    repo.add(["model"])
    c1 = repo.commit("base")
    # a corrupt file stops add half-way: the index and refs are untouched
    (repo.root / "model" / "broken.safetensors").write_bytes(struct.pack("<Q", 10) + b"{}")
    with pytest.raises(BadInputError):
        repo.add(["model"])
    assert repo.refs.head() == c1
    assert "model/broken.safetensors" not in repo._index().entries
    assert repo.status().untracked == ["model/broken.safetensors"]


def test_path_outside_the_repository_is_refused(repo, tmp_path):
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    with pytest.raises(BadInputError, match="outside the repository"):
        repo.add([outside])
    with pytest.raises(BadInputError, match="outside the repository"):
        repo.add(["../outside.txt"])


NAME_CHARS = st.characters(blacklist_categories=("Cs",))


@settings(max_examples=15, deadline=None)
@given(
    tensors=st.dictionaries(
        st.text(NAME_CHARS, max_size=12),
        st.tuples(
            st.sampled_from([torch.float32, torch.bfloat16, torch.int8, torch.float16, torch.bool]),
            st.lists(st.integers(0, 9), max_size=3),
        ),
        min_size=1,
        max_size=6,
    ),
    seed=st.integers(0, 2**16),
)
def test_random_safetensors_round_trip(tmp_path_factory, tensors, seed):
    g = torch.Generator().manual_seed(seed)
    sd = {}
    for name, (dtype, shape) in tensors.items():
        t = torch.randn(*shape, generator=g) if shape else torch.randn((), generator=g)
        sd[name] = (t > 0) if dtype == torch.bool else t.to(dtype)
    root = tmp_path_factory.mktemp("prop")
    with Repository.init(root / "r") as r:
        save_file(sd, r.root / "m.safetensors", metadata={"seed": str(seed)})
        want = sha256(r.root / "m.safetensors")
        r.add(["m.safetensors"])
        r.commit("random")
        (r.root / "m.safetensors").unlink()
        r.checkout("HEAD", ["m.safetensors"])
        assert sha256(r.root / "m.safetensors") == want
        got = r.state_dict(model=".")
        assert {k: raw_bytes(v) for k, v in got.items()} == {k: raw_bytes(v) for k, v in sd.items()}
