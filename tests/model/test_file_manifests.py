"""A large non-tensor file's manifest is checked before anything trusts it.

Why: every reader lays the file out from the sizes its manifest lists (checkout writes each
chunk at the sum of the sizes before it). A manifest whose fields were missing or of the wrong
type crashed checkout and fsck with an internal KeyError; one listing a chunk at the wrong size
made checkout write overlapping chunks (a wrong file, recorded clean) while fsck said ok.
"""

from __future__ import annotations

import json
from dataclasses import replace

import pytest
from helpers.cli import invoke
from helpers.opaque_files import NAME, chunks_at, commit_file, commit_manifest, gguf_like

from mgit import Repository
from mgit.errors import CorruptObjectError
from mgit.graph.names import CHUNKED_ENTRY
from mgit.graph.objects import MODE_FILE, MODE_TREE
from mgit.model.manifest import ChunkRef, FileManifest, TensorManifest, chunk_offsets

ID = "ab" * 32
GOOD = {"schema": "mgit.file/2", "size": 300, "chunks": [[ID, 100], [ID, 200]]}


def doc(**change: object) -> bytes:
    obj = {**GOOD, **change}
    return json.dumps({k: v for k, v in obj.items() if v is not None}).encode()


@pytest.mark.parametrize(
    ("data", "why"),
    [
        (doc(chunks=None), "'chunks' is missing"),
        (doc(size=None), "'size' is missing"),
        (doc(size="300"), "'size' is missing or of the wrong type"),
        (doc(size=True), "'size' is missing or of the wrong type"),
        (doc(chunks={"a": 1}), "'chunks' is missing or not a list"),
        (doc(chunks=[[ID, 100], [ID]]), "chunk 1 is not a list of 2 items"),
        (doc(chunks=[[ID, 100], "x"]), "chunk 1 is not a list of 2 items"),
        (doc(chunks=[["zz", 300]]), "chunk 0 has no valid id"),
        (doc(chunks=[[ID.upper(), 300]]), "chunk 0 has no valid id"),
        (doc(chunks=[[ID, -3], [ID, 303]]), "chunk 0 has size -3"),
        (doc(chunks=[[ID, 0], [ID, 300]]), "chunk 0 has size 0"),
        (doc(chunks=[[ID, 1.5], [ID, 298.5]]), "chunk 0 has size 1.5"),
        (doc(size=2**23, chunks=[[ID, 2**23]]), "chunk 0 has size 8388608 (not 1 to 4194304)"),
        (doc(size=301), "its chunks' sizes add up to 300, not to the file's 301"),
        (doc(schema="mgit.file/1"), "'chunk_size' is missing"),
        (doc(schema="mgit.file/1", chunk_size=0), "'chunk_size' is 0"),
    ],
)
def test_a_malformed_file_manifest_is_refused_naming_it(data, why):
    with pytest.raises(CorruptObjectError) as exc:
        FileManifest.from_bytes(data, "the manifest 123 of big.bin")
    assert str(exc.value).startswith("the manifest 123 of big.bin is not a valid mgit.file/")
    assert why in str(exc.value) and str(exc.value).endswith("; run `mgit fsck`")


def test_a_valid_file_manifest_reads_back_as_written():
    written = FileManifest(300, (ChunkRef(ID, 100), ChunkRef(ID, 200)))
    assert FileManifest.from_bytes(written.to_bytes()) == written
    fixed = FileManifest(300, (ChunkRef(ID, 200), ChunkRef(ID, 100)), chunk_size=200)
    assert FileManifest.from_bytes(fixed.to_bytes()) == fixed
    assert written.offsets() == chunk_offsets([100, 200]) == [0, 100, 300]
    tensor = TensorManifest("F32", (2, 2), 16, (ChunkRef(ID, 16, 1.0, 0.5),))
    assert TensorManifest.from_bytes(tensor.to_bytes()) == tensor and tensor.offsets(8) == [8, 24]


@pytest.mark.parametrize(
    "change",
    [
        {"chunks": None},
        {"shape": [2, -1]},
        {"shape": "2x2"},
        {"dtype": 5},
        {"chunk_size": 0},
        {"chunks": [[ID, 16, "big", None]]},
        {"chunks": [[ID, 16]]},
    ],
)
def test_a_malformed_tensor_manifest_is_refused(change):
    good = TensorManifest("F32", (2, 2), 16, (ChunkRef(ID, 16, 1.0, 0.5),))
    obj = {**json.loads(good.to_bytes()), **change}
    data = json.dumps({k: v for k, v in obj.items() if v is not None}).encode()
    with pytest.raises(CorruptObjectError, match="the manifest of w is not a valid mgit.tensor/1 object: "):
        TensorManifest.from_bytes(data, "the manifest of w")


def commit_raw_manifest(repo: Repository, data: bytes, message: str) -> None:
    """Commit, on top of HEAD, a chunked file whose manifest blob holds ``data`` as it is."""
    tree = repo.graph.put_tree([(CHUNKED_ENTRY, MODE_FILE, repo.graph.put_blob(data))])
    root = repo.graph.put_tree([(NAME, MODE_TREE, tree)])
    who, head = repo.identity(), repo.refs.head()
    repo.refs.advance_head(head, repo.graph.put_commit(root, [head], message, who, who), message)


@pytest.mark.parametrize(
    "bad",
    [b'{"schema":"mgit.file/2","size":5}', b'{"schema":"mgit.file/2","size":5,"chunks":[["zz",-3]]}'],
)
def test_checkout_and_fsck_name_a_malformed_manifest_in_one_line(repo, bad):
    data = gguf_like(5_000_000)
    commit_file(repo, data, "v1")
    commit_raw_manifest(repo, bad, "bad")
    (repo.root / NAME).unlink()
    out = invoke("checkout", "HEAD", "--", NAME, cwd=repo.root)
    assert out.exit_code == 1 and "internal error" not in out.stderr and len(out.stderr.splitlines()) == 1
    blob = repo.graph.tree(repo.snapshot("HEAD")[NAME].oid)[0][2]
    assert f"error: the manifest {blob[:12]} of " in out.stderr and "is not a valid mgit.file/2 object" in out.stderr
    assert not (repo.root / NAME).exists()
    out = invoke("fsck", cwd=repo.root)
    assert out.exit_code != 0 and "internal error" not in out.stderr + out.stdout
    assert f"{NAME} (commit " in out.stdout and "is not a valid mgit.file/2 object" in out.stdout
    assert invoke("checkout", "HEAD~1", "--", NAME, cwd=repo.root).exit_code == 0
    assert (repo.root / NAME).read_bytes() == data


@pytest.fixture
def lie(repo):
    """HEAD's manifest lists its first chunk 1000 bytes short, the file's size as well: it adds
    up, but that chunk does not hold what it says. (repository, the chunk, HEAD~1's bytes)"""
    data = gguf_like(6_000_000)
    commit_file(repo, data, "v1")
    stored = chunks_at(repo, "HEAD")
    first = stored.chunks[0]
    short = FileManifest(stored.size - 1000, (replace(first, size=first.size - 1000), *stored.chunks[1:]))
    commit_manifest(repo, short, NAME, "lie")
    (repo.root / NAME).unlink()
    return repo, first, data


def test_checkout_refuses_a_chunk_of_another_size_than_its_manifest_says(lie):
    """Before, the chunks were written overlapping: a wrong file, exit 0, status clean."""
    repo, first, data = lie
    why = f"chunk {first.id[:12]} of {NAME} holds {first.size} bytes; its manifest says {first.size - 1000}"
    with pytest.raises(CorruptObjectError, match=why):
        repo.checkout("HEAD", [NAME])
    assert not (repo.root / NAME).exists()
    repo.checkout("HEAD~1", [NAME])
    assert (repo.root / NAME).read_bytes() == data


def test_fsck_compares_a_manifest_s_sizes_with_the_store_s(lie):
    repo, first, _ = lie
    where = f"{NAME} (commit {repo.refs.head()[:12]})"
    want = f"{where}: chunk 0 ({first.id[:12]}) is listed as {first.size - 1000} bytes; it holds {first.size}"
    assert want in repo.fsck()
