"""Storage efficiency and health: XOR deltas, stats blobs, gc, fsck, du."""

from __future__ import annotations

import math
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from helpers.cli import invoke
from helpers.models import (
    TINY,
    LlamaSpec,
    commit_model,
    frozen_finetune,
    llama_state_dict,
    small_state_dict,
    touch_later,
    tree_hashes,
    write_model,
)
from helpers.run import run_mgit
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit import Repository
from mgit.errors import MgitError
from mgit.model.filetree import load_safetensors
from mgit.store.chunkstore import MAX_DELTA_DEPTH

SPEC = LlamaSpec(layers=4, hidden=128, intermediate=352, vocab=512)


def dense_finetune(sd: dict, seed: int, rel: float = 0.02) -> dict:
    """Every float tensor + noise of ``rel`` of its std (the issue's dense fine-tune)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, t in sd.items():
        f = t.float()
        std = f.std().item() if f.numel() > 1 and f.std().item() > 0 else 1.0
        out[name] = (f + torch.randn(f.shape, generator=g) * std * rel).to(t.dtype)
    return out


def chunk_ids(repo: Repository, rev: str = "HEAD") -> set[str]:
    out = set()
    for path, entry in repo.snapshot(rev).items():
        if entry.kind == "safetensors":
            for m in load_safetensors(repo.graph, entry.oid, path).manifests.values():
                out.update(c.id for c in m.chunks)
    return out


@pytest.fixture
def base_repo(repo):
    sd = llama_state_dict(SPEC)
    write_model(repo.root / "model", sd)
    repo.add(["model"])
    repo.commit("base")
    return repo, sd


def test_dense_finetune_is_delta_encoded_and_round_trips(base_repo):
    repo, sd = base_repo
    base_files = tree_hashes(repo.root)
    tuned = dense_finetune(sd, seed=1)
    write_model(repo.root / "model", tuned)
    touch_later(repo.root / "model" / "model.safetensors")
    res = repo.add(["model"])
    repo.commit("dense sft")
    raw = sum(t.numel() * t.element_size() for t in tuned.values())
    assert res.stored_bytes < 0.5 * raw  # the delta pays: a plain bf16 chunk is ~0.7x
    deltas = [repo.store.location(c) for c in chunk_ids(repo)]
    assert sum(loc.base is not None for loc in deltas) > len(deltas) // 2
    sft_files = tree_hashes(repo.root)
    shutil.rmtree(repo.root / "model")
    repo.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root) == sft_files
    repo.checkout("HEAD~1", ["model"])
    assert tree_hashes(repo.root) == base_files


def test_stats_blob_records_the_change_norm_of_every_changed_chunk(base_repo):
    repo, sd = base_repo
    tuned = frozen_finetune(sd, {0, 1}, scale=0.001)
    write_model(repo.root / "model", tuned)
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("sft")
    stats = repo.commit_stats()["model/model.safetensors"]
    base = load_safetensors(repo.graph, repo.snapshot("HEAD~1")["model/model.safetensors"].oid).manifests
    new = load_safetensors(repo.graph, repo.snapshot("HEAD")["model/model.safetensors"].oid).manifests
    by_chunk = {c: (p, l2) for c, p, l2 in stats}
    changed = [n for n in sd if not torch.equal(sd[n], tuned[n])]
    assert changed and len(by_chunk) == len(changed)  # one chunk per small tensor
    for name in changed:
        parent, l2 = by_chunk[new[name].chunks[0].id]
        assert parent == base[name].chunks[0].id
        expected = (tuned[name].double() - sd[name].double()).norm().item()
        assert math.isclose(l2, expected, rel_tol=1e-5)  # bf16: summed in float32 (format.md §9.1)
    # the stats travel in the commit's tree, not in the manifests
    assert all(
        "parent" not in repo.graph.blob(oid).decode()
        for oid in load_safetensors(repo.graph, repo.snapshot()["model/model.safetensors"].oid).manifest_ids.values()
    )


def test_add_base_deltas_against_another_revision(base_repo):
    repo, sd = base_repo
    repo.checkout(create_branch="other")
    (repo.root / "model" / "model.safetensors").unlink()
    write_model(repo.root / "model", llama_state_dict(SPEC, seed=9))
    repo.add(["model"])
    repo.commit("unrelated weights")
    write_model(repo.root / "model", dense_finetune(sd, seed=2))
    touch_later(repo.root / "model" / "model.safetensors")
    proc = invoke("add", "--base", "main", "model", cwd=repo.root)
    assert proc.returncode == 0, proc.stderr
    with Repository(repo.root) as fresh:
        commit = fresh.commit("dense sft of main, on this branch")
        assert set(p for _, p, _ in fresh.commit_stats(commit)["model/model.safetensors"]) <= chunk_ids(fresh, "main")


@pytest.mark.slow
def test_chain_of_ten_checkpoints_respects_the_delta_bound(repo):
    sd = llama_state_dict(SPEC)
    commits, states = [], []
    for step in range(10):
        sd = dense_finetune(sd, seed=100 + step, rel=0.01)
        commits.append(repo.commit_state_dict(sd, model="model", message=f"step {step}"))
        states.append(sd)
    depths = [repo.store.depth(c) for c in repo.store.ids()]
    assert max(depths) == MAX_DELTA_DEPTH and min(depths) == 0
    for commit, state in zip(commits, states, strict=True):
        got = repo.state_dict(commit)
        assert all(torch.equal(got[k], state[k]) for k in state)
    before = repo.store.reads.chunks
    repo.state_dict(commits[-1], names=["lm_head.weight"])
    assert repo.store.reads.chunks - before <= MAX_DELTA_DEPTH + 1


def test_identical_tensors_on_two_branches_share_one_manifest_blob(base_repo):
    repo, sd = base_repo
    repo.checkout(create_branch="b")
    tuned = frozen_finetune(sd, {0, 1, 2})
    write_model(repo.root / "model", tuned)
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("b")
    a = load_safetensors(repo.graph, repo.snapshot("main")["model/model.safetensors"].oid).manifest_ids
    b = load_safetensors(repo.graph, repo.snapshot("b")["model/model.safetensors"].oid).manifest_ids
    same = [n for n in sd if torch.equal(sd[n], tuned[n])]
    assert same and all(a[n] == b[n] for n in same)
    assert all(a[n] != b[n] for n in sd if n not in same)


CRASH = """
import os, signal, sys
from mgit import Repository
from mgit.errors import MgitError
from mgit.store import chunkstore
put = chunkstore.ChunkStore.put
count = [0]
def dying_put(self, *a, **k):
    r = put(self, *a, **k)
    count[0] += 1
    if count[0] == 6:
        os.kill(os.getpid(), signal.SIGKILL)
    return r
chunkstore.ChunkStore.put = dying_put
Repository(sys.argv[1]).add(["model"])
"""


def test_gc_after_a_crash_frees_orphans_and_keeps_every_commit(base_repo):
    repo, sd = base_repo
    repo.checkout(create_branch="sft")
    write_model(repo.root / "model", dense_finetune(sd, seed=3))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("sft")
    sft_files = tree_hashes(repo.root)
    repo.checkout("main")
    base_files = tree_hashes(repo.root)
    # 1) a crashed add: an unsealed pack and loose git objects nobody references
    write_model(repo.root / "model", dense_finetune(sd, seed=4))
    proc = subprocess.run([sys.executable, "-c", CRASH, str(repo.root)], capture_output=True)
    assert proc.returncode == -9
    # 2) staged then unstaged: a sealed pack of chunks nothing references
    (repo.root / "extra").mkdir()
    write_model(repo.root / "extra", llama_state_dict(SPEC, seed=5))
    repo.add(["extra"])
    repo.rm(["extra"], cached=True)
    shutil.rmtree(repo.root / "extra")
    repo.checkout("main", ["model"])
    live = chunk_ids(repo, "main") | chunk_ids(repo, "sft")
    assert not live >= repo.store.ids()  # orphans exist

    kept_young = repo.gc()  # default grace: everything is too recent to touch
    assert kept_young.chunks.removed_chunks == 0
    report = repo.gc(grace_seconds=0)
    assert report.chunks.removed_chunks > 0 and report.objects_removed > 0
    remaining = repo.store.ids()
    assert live <= remaining
    assert {repo.store.location(c).base for c in remaining} - {None} <= remaining
    assert not list((repo.git_dir / "chunks" / "packs").glob("*.pack"))[1:]  # one pack
    assert repo.fsck() == []
    repo.checkout("sft")
    assert tree_hashes(repo.root) == sft_files
    repo.checkout("main")
    assert tree_hashes(repo.root) == base_files


def test_gc_keeps_what_only_a_reflog_reaches(base_repo):
    repo, sd = base_repo
    repo.checkout(create_branch="tmp")
    tuned = dense_finetune(sd, seed=6)
    write_model(repo.root / "model", tuned)
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    lost = repo.commit("only in the reflog soon")
    repo.checkout("main")
    repo.delete_branch("tmp")
    repo.gc(grace_seconds=0)
    assert repo.fsck() == []
    got = repo.state_dict(lost)
    assert all(torch.equal(got[k], tuned[k]) for k in tuned)


def test_gc_interrupted_after_writing_the_new_pack_loses_nothing(base_repo, monkeypatch):
    repo, sd = base_repo
    files = tree_hashes(repo.root)
    from pathlib import Path

    real_unlink = Path.unlink

    def crash_on_old_pack(self, missing_ok=False):
        if self.suffix == ".pack":
            raise KeyboardInterrupt("killed while deleting old packs")
        return real_unlink(self, missing_ok=missing_ok)

    write_model(repo.root / "second", llama_state_dict(LlamaSpec(layers=1, hidden=32, intermediate=64, vocab=64)))
    repo.add(["second"])
    repo.commit("second pack")
    monkeypatch.setattr(Path, "unlink", crash_on_old_pack)
    with pytest.raises(KeyboardInterrupt):
        repo.gc(grace_seconds=0)
    monkeypatch.undo()
    with Repository(repo.root) as fresh:
        assert fresh.fsck() == []
        fresh.gc(grace_seconds=0)
        assert fresh.fsck() == []
        shutil.rmtree(fresh.root / "model")
        fresh.checkout("HEAD", ["model"])
    assert {k: v for k, v in tree_hashes(repo.root).items() if not k.startswith("second/")} == files


def corrupt(path, offset: int) -> None:
    data = bytearray(path.read_bytes())
    data[offset] ^= 0x5A
    os.chmod(path, 0o644)
    path.write_bytes(bytes(data))


@settings(max_examples=12, deadline=None)
@given(fraction=st.floats(0, 1, exclude_max=True))
def test_a_corrupted_byte_anywhere_in_a_pack_is_found(tmp_path_factory, fraction):
    root = tmp_path_factory.mktemp("corrupt")
    with Repository.init(root / "r") as repo:
        sd = llama_state_dict(LlamaSpec(layers=1, hidden=32, intermediate=64, vocab=64))
        write_model(repo.root / "model", sd)
        repo.add(["model"])
        repo.commit("base")
        (pack,) = (repo.git_dir / "chunks" / "packs").glob("*.pack")
        offset = int(fraction * pack.stat().st_size)
        corrupt(pack, offset)
    with Repository(root / "r") as repo:
        problems = repo.fsck()
        assert problems, f"flipping byte {offset} went unnoticed"
        loc = {c: repo.store.location(c) for c in repo.store.ids()}
        hit = [c for c, where in loc.items() if where.offset <= offset < where.offset + where.length]
        if hit:  # a chunk's bytes: checkout names the tensor that uses it
            (repo.root / "model" / "model.safetensors").unlink()
            proc = invoke("checkout", "HEAD", "--", "model", cwd=repo.root)
            assert proc.returncode == 1 and "tensor '" in proc.stderr and len(proc.stderr.splitlines()) == 1
            assert any("tensor '" in p for p in problems)


def test_fsck_cli_reports_each_problem_and_fails(base_repo):
    repo, _ = base_repo
    assert invoke("fsck", cwd=repo.root).returncode == 0
    (idx,) = (repo.git_dir / "chunks" / "packs").glob("*.idx")
    corrupt(idx, 40)
    proc = invoke("fsck", cwd=repo.root)
    assert proc.returncode == 1 and "damaged" in proc.stdout


def test_du_and_show_stats(base_repo):
    repo, sd = base_repo
    write_model(repo.root / "model", dense_finetune(sd, seed=7))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("dense")
    head, base = repo.du("HEAD"), repo.du("HEAD~1")
    assert head.logical_bytes == base.logical_bytes
    assert head.new_stored_bytes < 0.5 * head.logical_bytes  # the target for a dense fine-tune
    assert base.compression_ratio > 1.2  # bf16 N(0, 0.02), byte-grouped zstd
    import json

    doc = json.loads(invoke("du", "--json", cwd=repo.root, check=True).stdout)
    assert doc["schema"] == "mgit.du/1" and len(doc["commits"]) == 2
    assert doc["store"]["chunks_by_encoding"]["diff"] > 0  # a bf16 fine-tune: difference deltas
    show = json.loads(invoke("show", "--stats", "--json", cwd=repo.root, check=True).stdout)
    assert show["usage"]["new_stored_bytes"] == head.new_stored_bytes
    assert "dedup" in invoke("du", cwd=repo.root, check=True).stdout


def test_a_reader_sees_only_sealed_packs_while_a_writer_appends(base_repo):
    repo, sd = base_repo
    writer = repo.store
    cid = writer.put(b"\x01" * 4096, 1).cid
    reader = Repository(repo.root)
    assert not reader.store.has(cid)
    assert reader.state_dict(names=["lm_head.weight"])["lm_head.weight"].shape == sd["lm_head.weight"].shape
    writer.seal()
    assert reader.store.has(cid)  # a miss rescans for newly sealed packs
    reader.close()
    time.sleep(0)


def test_format_1_loose_chunks_are_read_and_packed_by_gc(base_repo):
    """A repository written before packs existed (one file per chunk) still works."""
    import struct

    from mgit.store import codec

    repo, sd = base_repo
    files = tree_hashes(repo.root)
    ids = repo.store.ids()
    for cid in ids:
        raw = bytes(repo.store.get(cid))
        encoding, payload = codec.encode(raw, 2)
        path = repo.store.loose.path(cid)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(struct.pack("<4sBBxxQ", b"MGC1", encoding, 2, len(raw)) + payload)
    repo.close()
    shutil.rmtree(repo.git_dir / "chunks" / "packs")
    config = repo.git_dir / "config"
    config.write_text(config.read_text().replace("formatversion = 4", "formatversion = 1"))
    with Repository(repo.root) as old:
        assert old.format == 1 and old.store.ids() == ids
        got = old.state_dict()
        assert all(torch.equal(got[k], sd[k]) for k in sd)
        old.gc(grace_seconds=0)
        assert old.format == 4 and "formatversion = 4" in config.read_text()
        assert not list(old.store.loose_ids()) and old.store.ids() == ids
        assert old.fsck() == []
        shutil.rmtree(old.root / "model")
        old.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root) == files


def test_a_format_2_repository_is_read_and_its_next_add_stores_difference_deltas(base_repo, monkeypatch):
    """Format 2 knew only XOR deltas. This mgit reads such a repository as it is; the first add
    upgrades it to the current format (older mgit would refuse the difference deltas it then
    writes) and stores the next fine-tune as difference deltas on top of the XOR ones."""
    from mgit.store import codec

    repo, sd = base_repo
    first = dense_finetune(sd, seed=1)
    write_model(repo.root / "model", first)
    touch_later(repo.root / "model" / "model.safetensors")
    with monkeypatch.context() as m:
        m.setattr(codec, "diffs", lambda *a: False)  # as format 2 wrote every delta
        repo.add(["model"])
    repo.commit("sft 1")
    xor_ids = chunk_ids(repo)
    repo.close()
    config = repo.git_dir / "config"
    config.write_text(config.read_text().replace("formatversion = 4", "formatversion = 2"))
    with Repository(repo.root) as old:
        assert old.format == 2
        assert {old.store.location(c).encoding for c in xor_ids} >= {codec.XOR_DELTA}
        assert all(torch.equal(t, first[k]) for k, t in old.state_dict().items())
        second = dense_finetune(first, seed=2)
        write_model(old.root / "model", second)
        touch_later(old.root / "model" / "model.safetensors")
        old.add(["model"])
        old.commit("sft 2")
        assert old.format == 4 and "formatversion = 4" in config.read_text()
        new = [old.store.location(c) for c in chunk_ids(old) - xor_ids]
        assert new and all(loc.encoding == codec.DIFF_DELTA for loc in new if loc.base is not None)
        assert sum(loc.base is not None for loc in new) > len(new) // 2
        assert old.fsck() == []
        files = tree_hashes(old.root)
        shutil.rmtree(old.root / "model")
        old.checkout("HEAD", ["model"])
        assert tree_hashes(old.root) == files
        assert all(torch.equal(t, first[k]) for k, t in old.state_dict("HEAD~1").items())
        assert all(torch.equal(t, second[k]) for k, t in old.state_dict().items())
    config.write_text(config.read_text().replace("formatversion = 4", "formatversion = 5"))
    with pytest.raises(MgitError, match="uses mgit format 5; this mgit reads formats 1, 2, 3, 4: upgrade mgit"):
        Repository(repo.root)


def test_gc_cli(base_repo):
    repo, _ = base_repo
    (repo.root / "junk.safetensors").write_bytes(b"")
    from safetensors.torch import save_file

    save_file({"junk": torch.randn(64, 64)}, repo.root / "junk.safetensors")
    repo.add(["junk.safetensors"])
    repo.rm(["junk.safetensors"])
    young = invoke("gc", cwd=repo.root, check=True)
    assert "removed 0 chunk(s)" in young.stderr
    now = invoke("gc", "--now", cwd=repo.root, check=True)
    assert "removed 1 chunk(s)" in now.stderr
    assert invoke("fsck", cwd=repo.root).returncode == 0


def test_appended_rows_delta_against_the_old_last_chunk(repo):
    g = torch.Generator().manual_seed(0)
    emb = (torch.randn(20000, 256, generator=g) * 0.02).to(torch.bfloat16)  # 8192 rows a chunk
    write_model(repo.root / "m", {"model.embed_tokens.weight": emb})
    repo.add(["m"])
    repo.commit("base")
    grown = torch.cat([emb, (torch.randn(100, 256, generator=g) * 0.02).to(torch.bfloat16)])
    write_model(repo.root / "m", {"model.embed_tokens.weight": grown})
    touch_later(repo.root / "m" / "model.safetensors")
    res = repo.add(["m"])
    repo.commit("vocab + 100 rows")
    new_rows = 100 * 256 * 2
    assert res.new_chunks == 1 and res.stored_bytes < new_rows  # the old tail rows cost ~nothing
    got = repo.state_dict()["model.embed_tokens.weight"]
    assert torch.equal(got, grown)


def test_expired_reflogs_let_gc_reclaim_a_deleted_branch(base_repo):
    repo, sd = base_repo
    main_files = tree_hashes(repo.root)
    repo.checkout(create_branch="tmp")
    write_model(repo.root / "model", dense_finetune(sd, seed=7))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    lost = repo.commit("to be forgotten")
    repo.checkout("main")
    repo.delete_branch("tmp")
    assert repo.reflog()[0][1] == repo.refs.head() and any(new == lost for _, new, _, _ in repo.reflog())
    assert repo.reflog_expire(days=1) == 0  # everything is younger than a day
    chunks_before = len(repo.store.ids())
    assert repo.reflog_expire(None) > 0 and repo.reflog() == []
    report = repo.gc(grace_seconds=0)
    assert report.chunks.removed_chunks > 0 and len(repo.store.ids()) < chunks_before
    assert repo.fsck() == [] and not repo.graph.has(lost)
    repo.checkout("main", force=True)
    assert tree_hashes(repo.root) == main_files
    listed = invoke("reflog", cwd=repo.root, check=True)
    assert listed.returncode == 0
    expired = invoke("reflog", "expire", "--all", cwd=repo.root, check=True)
    assert "reflog entr" in expired.stderr


def test_fsck_repair_rebuilds_a_damaged_pack_index(base_repo):
    repo, sd = base_repo
    files = tree_hashes(repo.root)
    (idx,) = (repo.git_dir / "chunks" / "packs").glob("*.idx")
    corrupt(idx, 40)
    broken = run_mgit("fsck", cwd=repo.root)
    assert broken.returncode == 1 and "damaged" in broken.stdout
    proc = run_mgit("fsck", "--repair", cwd=repo.root)
    assert proc.returncode == 0, proc.stderr
    assert "rebuilt 1 pack index" in proc.stderr and "0 still missing" in proc.stderr
    fresh = Repository(repo.root)
    assert fresh.fsck() == []
    shutil.rmtree(repo.root / "model")
    fresh.checkout("HEAD", ["model"])
    assert tree_hashes(repo.root) == files


# -- item 15: repair's writes are durable and leave no temporary file on error ------------------


def test_atomic_write_fsyncs_and_leaves_nothing_on_error(tmp_path: Path, monkeypatch) -> None:
    from mgit import durable

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(durable.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    durable.atomic_write(tmp_path / "d" / "f", b"one")
    assert (tmp_path / "d" / "f").read_bytes() == b"one" and len(synced) == 2  # the file, then its directory

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "replace", full)
    with pytest.raises(OSError):
        durable.atomic_write(tmp_path / "d" / "f", b"two")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["f"]
    assert (tmp_path / "d" / "f").read_bytes() == b"one"


@pytest.mark.parametrize("writer", ["ref", "packed-refs", "reflog", "loose"])
def test_repair_writes_leave_no_temporary_file_on_error(repo: Repository, monkeypatch, writer: str) -> None:
    from mgit import durable
    from mgit.maintenance import repair

    head = commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    (repo.git_dir / "packed-refs").write_bytes(b"# pack-refs with: peeled\nnot a line\n")
    log = repo.git_dir / "logs" / "refs" / "heads" / "main"
    log.write_bytes(log.read_bytes() + b"garbage line\n")
    before = {p: p.read_bytes() for p in repo.git_dir.rglob("*") if p.is_file() and "chunks" not in p.parts}

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "fsync", full)
    with pytest.raises(OSError):
        if writer == "ref":
            repair._write_ref(repo.git_dir, "refs/heads/x", head, b"A <a@b>", "test")
        elif writer == "packed-refs":
            repair._rewrite_packed_refs(repo.git_dir)
        elif writer == "reflog":
            repair._clean_reflogs(repo.graph)
        else:
            repair.write_loose(repo.graph, repo.graph.read(head))
    after = {p for p in repo.git_dir.rglob("*") if p.is_file() and "chunks" not in p.parts}
    assert after == set(before), sorted(str(p) for p in after ^ set(before))


def test_du_new_bytes_of_a_merge_count_chunks_no_parent_has(repo):
    """A merge's parents are its base and experts: a merge that copies an expert's tensors (here
    passthrough) stores nothing new, and du says so (it used to count against the first parent
    only, calling the expert's chunks new)."""
    commit_model(repo, small_state_dict(seed=1), "base")
    repo.checkout(create_branch="other")
    commit_model(repo, small_state_dict(seed=2), "other")
    repo.checkout("main")
    merge = repo.merge(["other"], "passthrough", branch="copied")
    assert repo.du(merge).new_stored_bytes == 0
    assert repo.du(merge).stored_bytes > 0
