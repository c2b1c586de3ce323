"""Large non-tensor files (a GGUF, a pickled checkpoint): content-defined chunks and patch deltas.

Why: such files used to be cut every 4 MiB with no delta base, so a one-row change of a 10.5 MB
GGUF stored 4.2 MB anew, a few bytes inserted near the start changed every later chunk, and
`diff --stat` counted "0 chunk(s), 0 bytes" for the file. Cut where their content says and
stored as patch deltas against the parent version's chunks, an edit costs about its own size.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers.cli import invoke
from helpers.models import touch_later, tree_hashes
from helpers.opaque_files import NAME, chunks_at, commit_file, commit_manifest, gguf_like
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from mgit import Repository
from mgit.model import opaque
from mgit.model.chunking import CDC_MAX, CDC_MIN, cdc_chunks
from mgit.model.manifest import ChunkRef, FileManifest
from mgit.store import codec

ROW = 4096  # bytes of one quantized row


@pytest.fixture
def gguf(repo):
    """A repository whose HEAD holds a 6 MB GGUF-like file."""
    data = gguf_like(6_000_000)
    commit_file(repo, data, "v1")
    return repo, data


def test_an_insertion_near_the_start_stores_only_a_few_new_chunks(gguf):
    repo, data = gguf
    result = commit_file(repo, data[:100] + b"INSERTED" + data[100:], "insert")
    assert result.new_chunks <= 2 and result.stored_bytes < 16_384  # was every chunk: 6 MB
    old, new = chunks_at(repo, "HEAD~1"), chunks_at(repo, "HEAD")
    assert [c.id for c in new.chunks[1:]] == [c.id for c in old.chunks[1:]]  # the cuts moved with the bytes


def test_a_one_row_change_stores_a_delta_much_smaller_than_its_chunk(gguf):
    repo, data = gguf
    at = 3_000_000
    edited = data[:at] + os.urandom(ROW) + data[at + ROW :]
    result = commit_file(repo, edited, "one row")
    old, new = chunks_at(repo, "HEAD~1"), chunks_at(repo, "HEAD")
    changed = [c for c in new.chunks if c not in old.chunks]
    assert len(changed) == 1 and changed[0].size >= CDC_MIN
    loc = repo.store.location(changed[0].id)
    assert loc is not None and loc.encoding == codec.PATCH_DELTA and loc.base in {c.id for c in old.chunks}
    assert result.stored_bytes < ROW + 1024  # the row itself and little else, of a chunk of ~1 MB
    assert repo.du("HEAD").new_stored_bytes == result.stored_bytes  # `du`'s new bytes are these
    repo.store.forget_indexes()  # read back from the sealed pack, each chunk verified against its id
    assert b"".join(bytes(repo.store.get(c.id)) for c in new.chunks) == edited


def test_diff_stat_counts_the_chunks_a_large_file_changed(gguf):
    repo, data = gguf
    commit_file(repo, data[:2_000_000] + b"x" * 10 + data[2_000_000:], "insert")
    new = chunks_at(repo, "HEAD")
    changed = [c for c in new.chunks if c not in chunks_at(repo, "HEAD~1").chunks]
    expected = f"{len(changed)} chunk(s)"
    out = invoke("diff", "--stat", "HEAD~1", "HEAD", cwd=repo.root, check=True).stdout
    assert f" {NAME} | modified: {expected}" in out and f"; {expected}, " in out.splitlines()[-1]
    (repo.root / NAME).write_bytes(data)  # the working tree: cut as add would cut it
    touch_later(repo.root / NAME)
    doc = invoke("diff", "--stat", "--json", cwd=repo.root, check=True).stdout
    assert '"chunks_changed": 1' in doc and '"bytes_changed": 0' not in doc
    assert invoke("diff", "--stat", "HEAD", "HEAD", cwd=repo.root).stderr.startswith("no differences")


edits = st.lists(
    st.tuples(st.sampled_from(["insert", "delete", "overwrite"]), st.integers(0, 4_600_000), st.integers(1, 70_000)),
    min_size=1,
    max_size=3,
)


@settings(max_examples=6, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(edits=edits)
def test_every_version_checks_out_byte_exact(tmp_path_factory, edits):
    """Random inserts, deletes and overwrites, each committed on top of the last (patch deltas
    on patch deltas); every version then checks out as it was written."""
    repo = Repository.init(tmp_path_factory.mktemp("edits") / "work")
    try:
        versions = [gguf_like(4_700_000, seed=len(edits))]
        commit_file(repo, versions[0], "v0")
        rng = np.random.default_rng(7)
        for kind, at, n in edits:
            data = versions[-1]
            new = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
            if kind == "insert":
                data = data[:at] + new + data[at:]
            elif kind == "delete":
                data = data[:at] + data[at + n :]
            else:
                data = data[:at] + new + data[at + n :]
            versions.append(data)
            commit_file(repo, data, kind)
        assert repo.fsck() == []
        for back, data in enumerate(reversed(versions)):
            (repo.root / NAME).unlink()
            repo.checkout(f"HEAD~{back}", [NAME])
            assert (repo.root / NAME).read_bytes() == data
            if len(data) > CDC_MAX:  # (a delete may leave a small file: a git blob)
                sizes = [c.size for c in chunks_at(repo, f"HEAD~{back}").chunks]
                assert max(sizes) <= CDC_MAX and min(sizes[:-1], default=CDC_MIN) >= CDC_MIN
    finally:
        repo.close()


def test_the_cut_points_are_pinned(tmp_path):
    """Another cut of the same bytes (a pyfastcdc release that changed them) would give other
    chunk ids: nothing would dedup against the versions stored before. pyproject pins < 0.4."""
    data = np.random.default_rng(0).integers(0, 256, 8_000_000, dtype=np.uint8).tobytes()
    (tmp_path / "f").write_bytes(data)
    with open(tmp_path / "f", "rb") as f:
        cuts = [(at, len(raw)) for at, raw in cdc_chunks(f.fileno(), len(data))]
    assert [at for at, _ in cuts] == [0, 972082, 2094529, 3328012, 4872815, 5855221, 6728340]
    assert b"".join(data[at : at + n] for at, n in cuts) == data


def old_fixed_file(repo: Repository, data: bytes, name: str) -> None:
    """Commit ``data`` as mgit before format 4 did (docs/format.md §6.3, §8.3): fixed 4 MiB
    chunks, no delta, an mgit.file/1 manifest; then mark the repository format 3."""
    size = codec.MAX_CHUNK_BYTES
    refs = []
    for at in range(0, len(data), size):
        raw = data[at : at + size]
        refs.append(ChunkRef(repo.store.put(raw, 1).cid, len(raw)))
    repo.store.seal()
    manifest = FileManifest(len(data), tuple(refs), chunk_size=size)
    assert manifest.to_bytes().startswith(b'{"chunk_size":4194304,"chunks":[[')
    commit_manifest(repo, manifest, name, "format 3")
    config = repo.git_dir / "config"
    config.write_text(config.read_text().replace("formatversion = 4", "formatversion = 3"))


def test_a_file_stored_in_fixed_chunks_still_reads_and_its_next_version_deltas(tmp_path):
    work = tmp_path / "work"
    data = gguf_like(9_000_000)
    with Repository.init(work) as repo:
        repo.config_set("user.name", "Ada")
        repo.config_set("user.email", "ada@example.com")
        old_fixed_file(repo, data, NAME)
    with Repository(work) as repo:
        assert repo.format == 3 and chunks_at(repo, "HEAD").chunk_size == codec.MAX_CHUNK_BYTES
        repo.checkout("HEAD", [NAME])
        assert (work / NAME).read_bytes() == data
        touch_later(work / NAME)
        assert repo.status().clean  # compared at the committed chunks' own offsets
        assert invoke("diff", cwd=work).stderr.startswith("no differences")
        edited = data[:5_000_000] + os.urandom(ROW) + data[5_000_000 + ROW :]
        result = commit_file(repo, edited, "one row")
        assert repo.format == 4 and chunks_at(repo, "HEAD").chunk_size is None
        assert result.stored_bytes < 0.25 * len(data)  # patch deltas against the fixed chunks
        assert repo.fsck() == []
        for rev, want in (("HEAD~1", data), ("HEAD", edited)):
            (work / NAME).unlink()
            repo.checkout(rev, [NAME])
            assert (work / NAME).read_bytes() == want


def test_fsck_repair_recovers_a_damaged_chunk_from_the_working_file(gguf):
    repo, data = gguf
    cid = chunks_at(repo, "HEAD").chunks[2].id
    loc = repo.store.location(cid)
    damaged = bytearray(loc.pack.read_bytes())
    damaged[loc.offset + loc.length - 10] ^= 0x01
    os.chmod(loc.pack, 0o644)
    loc.pack.write_bytes(bytes(damaged))
    with Repository(repo.root) as again:
        assert any(cid[:12] in p for p in again.fsck())
        report = again.fsck_repair()  # the working file cut as add cuts it holds the chunk
        assert cid in report.dropped and report.from_worktree >= 1 and report.missing == {}
        assert again.fsck() == []


def test_fsck_names_a_large_file_whose_chunks_do_not_add_up_to_it(gguf):
    repo, data = gguf
    assert repo.fsck() == []
    stored = chunks_at(repo, "HEAD")
    commit_manifest(repo, FileManifest(stored.size + 1, stored.chunks), NAME, "one byte short")
    why = f"its chunks' sizes add up to {stored.size}, not to the file's {stored.size + 1}"
    named = [p for p in repo.fsck() if why in p]
    assert len(named) == 1 and f"of {NAME} (commit " in named[0]  # once: not again by the files' check


def test_a_large_file_that_shrinks_while_add_reads_it_is_named(repo, monkeypatch):
    """As any file that changes while read: one line naming it (before: an OSError naming no file)."""
    path = repo.root / NAME
    path.write_bytes(gguf_like(12_000_000))  # the cutter reads 8 MiB, then cuts: the rest is read later
    cut = opaque.cdc_chunks

    def shrinking(fd: int, size: int):
        for k, chunk in enumerate(cut(fd, size)):
            if k == 0:
                os.truncate(path, 3_000_000)
            yield chunk

    monkeypatch.setattr(opaque, "cdc_chunks", shrinking)
    out = invoke("add", NAME, cwd=repo.root)
    assert out.exit_code == 2 and out.stderr.splitlines() == [
        f"error: {NAME} changed while mgit was reading it; nothing was staged. Run `mgit add` again once it is written"
    ]
    assert repo.status().untracked == [NAME] and repo.store.indexes() == []


def test_a_chunk_fetched_on_demand_marks_an_older_partial_clone_with_the_format(tmp_path):
    """A partial clone made before format 4, reading a file whose chunks the remote stores as patch
    deltas, fetches those records: the repository is marked format 4 before they are published
    (before, it said format 3: an older mgit would meet an encoding it does not know)."""
    repo = Repository.init(tmp_path / "work")
    data = gguf_like(5_000_000)
    commit_file(repo, data, "v1")
    repo.create_branch("old")
    edited = data[:3_000_000] + os.urandom(ROW) + data[3_000_000 + ROW :]
    commit_file(repo, edited, "v2")
    repo.remote_add("origin", str(tmp_path / "remote"))
    repo.push("origin", "main")
    repo.push("origin", "old")
    clone = Repository.clone(str(tmp_path / "remote"), tmp_path / "clone", partial=True, branch="old")
    clone.close()
    config = tmp_path / "clone" / ".mgit" / "config"
    config.write_text(config.read_text().replace("formatversion = 4", "formatversion = 3"))
    with Repository(tmp_path / "clone") as old:
        (changed,) = [c.id for c in chunks_at(old, "origin/main").chunks if c not in chunks_at(old, "old").chunks]
        assert old.format == 3 and not old.store.has(changed, refresh=False)
        old.checkout("origin/main", [NAME])  # fetches v2's changed chunk: a patch delta
        assert (old.root / NAME).read_bytes() == edited
        assert old.store.location(changed).encoding == codec.PATCH_DELTA
    with Repository(tmp_path / "clone") as again:
        assert again.format == 4


def test_patch_deltas_survive_push_clone_pull_and_gc(tmp_path):
    """A delta is sent after its base (a clone verifies each one on arrival), gc keeps the
    bases a kept chunk needs, and every version reads back whole."""
    repo = Repository.init(tmp_path / "work")
    data = gguf_like(5_000_000)
    versions = [data, data[:3_000_000] + os.urandom(ROW) + data[3_000_000 + ROW :]]
    versions.append(versions[1][:50] + b"new key" + versions[1][50:])
    commit_file(repo, versions[0], "v1")
    repo.remote_add("origin", str(tmp_path / "remote"))
    repo.push()
    other = Repository.clone(str(tmp_path / "remote"), tmp_path / "other")
    for i, data in enumerate(versions[1:], 2):
        commit_file(repo, data, f"v{i}")
    patched = [c.id for c in chunks_at(repo, "HEAD").chunks if repo.store.location(c.id).encoding == codec.PATCH_DELTA]
    assert patched  # the insertion's chunk, on top of the row's
    repo.push()
    other.pull()
    assert tree_hashes(other.root) == tree_hashes(repo.root) and other.fsck() == []
    who, tree = repo.identity(), repo.graph.commit(repo.refs.head()).tree
    lonely = repo.graph.put_commit(tree, [], "v3 alone", who, who)
    repo.refs.create_branch("lonely", lonely)
    repo.checkout("lonely")
    repo.delete_branch("main", force=True)
    repo.reflog_expire(None)
    repo.gc(grace_seconds=0)  # only v3 is reachable: its deltas' bases stay
    assert repo.fsck() == []
    (repo.root / NAME).unlink()
    repo.checkout("HEAD", [NAME])
    assert (repo.root / NAME).read_bytes() == versions[-1]
    repo.remote_add("fresh", str(tmp_path / "fresh"))
    repo.push("fresh", "lonely")
    clone = Repository.clone(str(tmp_path / "fresh"), tmp_path / "clone", branch="lonely")
    assert clone.fsck() == [] and (clone.root / NAME).read_bytes() == versions[-1]
