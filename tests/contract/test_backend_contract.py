"""The Backend contract, one suite for every remote (memory, directory, a working repository,
`mgit serve` over HTTP, S3 on moto's server): what transfers rely on, so that a new backend is a
file plus one fixture (tests/contract/conftest.py).

The promises: objects are held as put and a put is idempotent; what is absent is reported as
absent (get raises MissingObjectError, has and sizes leave it out); sizes are the stored bytes;
refs are listed and move only by compare-and-swap, of many concurrent swaps exactly one wins;
a put interrupted part-way leaves nothing visible, and an interrupted push leaves the refs as
they were and resumes with what is missing; tampered bytes are rejected when read (objects and
chunks are checked against their ids); names outside the key space are refused; ref values
that are no commit id, or clash with another ref, are refused.

A working repository differs where git's does: it publishes what a push sent when the push ends
(``reopen`` publishes first), its HEAD names its own branch, which no push may move, and of
concurrent pushers the ones that find its lock taken fail instead of losing a swap.
"""

from __future__ import annotations

import threading

import pytest
from helpers.models import LlamaSpec, commit_model, llama_state_dict
from helpers.remotes import Remote, cut_after, git_commits, put_commits, raw_chunk

from mgit import Repository
from mgit.errors import CorruptObjectError, LockedError, MgitError, RemoteError
from mgit.progress import Bar
from mgit.remote.backend import BadRefError, MissingObjectError, chunk_key, object_key, unpack_object
from mgit.remote.transfer import Transfer, fetch_chunks, fetch_graph, plan_push, push
from mgit.store.chunkstore import ChunkStore

ABSENT = ["objects/" + "0" * 40, "chunks/" + "0" * 64, "refs/heads/main", "refs/tags/v1", "HEAD"]
SMALL = LlamaSpec(layers=2, hidden=32, intermediate=64, vocab=64)


def _ref_error(remote: Remote) -> type[Exception]:
    """What a refused ref update raises: the backend's BadRefError, or over HTTP the server's
    400 as the one-line RemoteError (BadRefError's base)."""
    return RemoteError if remote.kind == "http" else BadRefError


def test_put_objects_are_held_as_put_and_put_is_idempotent(remote):
    objects, _ = git_commits(2)
    cid, record = raw_chunk(b"a chunk of weights" * 100)
    stored = [*objects, (chunk_key(cid), record)]
    for key, data in stored:
        remote.backend.put(key, data)
    for key, data in stored:
        remote.backend.put(key, data)  # again: nothing changes
        assert remote.backend.get(key) == data
        assert remote.reopen().get(key) == data


def test_missing_objects_are_reported_as_missing(remote):
    absent = [key for key in ABSENT if key != "HEAD" or remote.checked_out is None]  # a working one's names its branch
    for backend in (remote.backend, remote.reopen()):  # nothing there yet (no repository at all over HTTP)
        for key in absent:
            with pytest.raises(MissingObjectError):
                backend.get(key)
        assert backend.has(ABSENT) == set() and backend.sizes(ABSENT) == {}
        assert backend.refs() == {} and backend.head() == remote.checked_out
    (head,) = put_commits(remote.backend, 1)
    assert remote.backend.swap_ref("refs/heads/main", None, head)
    for backend in (remote.backend, remote.reopen()):
        for key in [*ABSENT[:2], "refs/tags/v1", "refs/heads/main/x"]:  # the last under a ref that exists
            with pytest.raises(MissingObjectError):
                backend.get(key)
        assert backend.has([*ABSENT[:2], "refs/heads/main/x"]) == set()
        assert backend.sizes([*ABSENT[:2], "refs/heads/main/x"]) == {}


def test_sizes_are_the_stored_bytes(remote):
    """(Moved here from test_sizes.py's directory and S3 tests.)"""
    objects, _ = git_commits(3)
    chunks = [raw_chunk(bytes([i]) * (1000 + i)) for i in range(5)]
    stored = dict(objects) | {chunk_key(cid): data for cid, data in chunks}
    keys = sorted(stored)
    writer = remote.backend
    for key in keys:
        writer.put(key, stored[key])
    expected = {k: len(stored[k]) for k in keys}
    absent = "chunks/" + "2" * 64
    assert writer.sizes(keys + [absent]) == expected  # puts update a kept listing
    assert writer.sizes([]) == {}
    reader = remote.reopen()
    assert reader.sizes(keys + [absent]) == expected
    assert reader.has(keys) == set(keys)


def test_listing_answers_has_in_one_batch_and_lists_only_refs(remote):
    chunks = [raw_chunk(i.to_bytes(4, "big") * 64) for i in range(40)]
    for cid, data in chunks[:30]:
        remote.backend.put(chunk_key(cid), data)
    keys = [chunk_key(cid) for cid, _ in chunks]
    assert remote.reopen().has(keys) == set(keys[:30])
    a, b = put_commits(remote.backend, 2)
    assert remote.backend.swap_ref("refs/heads/main", None, a)
    assert remote.backend.swap_ref("refs/heads/topic/x", None, b)
    assert remote.backend.swap_ref("refs/tags/v1", None, a)
    listed = {"refs/heads/main": a, "refs/heads/topic/x": b, "refs/tags/v1": a}
    assert remote.backend.refs() == listed and remote.reopen().refs() == listed  # no HEAD, no objects
    assert remote.reopen().head() == (remote.checked_out or "main")  # the first branch a clone checks out
    assert remote.backend.swap_ref("refs/heads/topic/x", b, None)
    assert remote.reopen().refs() == {"refs/heads/main": a, "refs/tags/v1": a}


def test_refs_move_by_compare_and_swap(remote):
    """(Moved here from test_s3_remote.py's test_refs_move_by_conditional_writes.)"""
    backend = remote.backend
    a, b = put_commits(backend, 2)
    assert backend.swap_ref("refs/heads/x", None, a)
    assert not backend.swap_ref("refs/heads/x", None, b)  # exists already
    assert not backend.swap_ref("refs/heads/x", b, a)  # not what it is
    assert backend.swap_ref("refs/heads/x", a, b) and backend.refs()["refs/heads/x"] == b
    assert backend.swap_ref("refs/heads/x", b, None) and "refs/heads/x" not in backend.refs()


def _race(remote: Remote, ref: str, old: str | None, news: list[str | None]) -> list[str | None]:
    """Every client swaps ``ref`` from ``old`` to its own value at once; the values that won."""
    clients = [remote.reopen() for _ in news]
    start, won, errors = threading.Barrier(len(news)), [], []

    def swap(client, new: str | None) -> None:
        try:
            start.wait()
            if client.swap_ref(ref, old, new):
                won.append(new)
        except LockedError as exc:  # another pusher holds a working repository's lock: this one lost
            if not remote.locks:
                errors.append(exc)
        except Exception as exc:  # reported below: a swap may lose, not fail
            errors.append(exc)

    threads = [threading.Thread(target=swap, args=(c, n)) for c, n in zip(clients, news, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors, errors
    return won


def test_of_concurrent_swaps_exactly_one_wins(remote):
    ids = put_commits(remote.backend, 12)
    won = _race(remote, "refs/heads/main", None, ids[:6])  # creating the ref
    assert len(won) == 1 and remote.reopen().refs()["refs/heads/main"] == won[0]
    again = _race(remote, "refs/heads/main", won[0], ids[6:])  # moving it
    assert len(again) == 1 and remote.reopen().refs()["refs/heads/main"] == again[0]


def test_a_ref_is_deleted_only_from_the_value_it_holds(remote):
    """Deleting a ref (push --delete) is a compare-and-swap to "absent": refused, the ref kept,
    when it holds another value or is gone already; a deleted branch or tag can be made again."""
    a, b = put_commits(remote.backend, 2)
    for ref in ("refs/heads/topic", "refs/tags/v1"):
        assert remote.backend.swap_ref(ref, None, a)
        assert not remote.reopen().swap_ref(ref, b, None) and remote.reopen().refs()[ref] == a
        assert remote.reopen().swap_ref(ref, a, None) and ref not in remote.reopen().refs()
        assert not remote.reopen().swap_ref(ref, a, None)  # gone already
        assert remote.backend.swap_ref(ref, None, b) and remote.reopen().refs()[ref] == b


def test_of_a_concurrent_delete_and_moves_exactly_one_wins(remote):
    ids = put_commits(remote.backend, 6)
    assert remote.backend.swap_ref("refs/heads/main", None, ids[0])
    won = _race(remote, "refs/heads/main", ids[0], [None, *ids[1:]])
    assert len(won) == 1
    assert remote.reopen().refs().get("refs/heads/main") == won[0]  # None: deleted, absent


def test_push_delete_removes_the_remote_branch(remote, tmp_path):
    """`mgit push --delete` through each backend a repository can name by URL."""
    if remote.kind == "memory":
        pytest.skip("a memory remote has no URL a repository can name")
    repo = Repository.init(tmp_path / "work")
    head = commit_model(repo, llama_state_dict(SMALL), "base")
    repo.remote_add("origin", remote.backend.url)
    repo.push()
    repo.create_branch("exp")
    repo.push("origin", "exp")
    assert set(remote.reopen().refs()) == {"refs/heads/main", "refs/heads/exp"}
    report = repo.push("origin", "exp", delete=True)
    assert report.deleted == {"refs/heads/exp": head} and remote.reopen().refs() == {"refs/heads/main": head}
    if remote.checked_out is None:
        with pytest.raises(MgitError, match="default branch"):
            repo.push("origin", "main", delete=True)
    else:  # a working repository has no default branch but its own, which it keeps from pushes
        repo.create_branch(remote.checked_out)
        with pytest.raises(MgitError, match="checked-out branch"):
            repo.push("origin", remote.checked_out)
    assert remote.reopen().refs() == {"refs/heads/main": head}
    repo.close()


def test_a_put_interrupted_part_way_leaves_nothing_visible(remote):
    objects, _ = git_commits(1)
    cid, record = raw_chunk(b"half of this never arrives " * 200)
    for key, data in [objects[-1], (chunk_key(cid), record)]:
        remote.die_mid_put(key, data)
        for backend in (remote.backend, remote.reopen()):
            with pytest.raises(MissingObjectError):
                backend.get(key)
            assert backend.has([key]) == set() and backend.sizes([key]) == {}
        remote.backend.put(key, data)  # put again: whole
        assert remote.reopen().get(key) == data and remote.reopen().sizes([key]) == {key: len(data)}
    assert remote.reopen().refs() == {}


def test_an_interrupted_push_leaves_the_refs_and_resumes_with_what_is_missing(remote, tmp_path, monkeypatch):
    repo = Repository.init(tmp_path / "work")
    head = commit_model(repo, llama_state_dict(SMALL), "base")
    plan = plan_push(repo.graph, repo.store, remote.backend, head, "refs/heads/main", False)
    total = sum(len(wave) for wave in plan.chunks)
    assert total > 3
    real = type(remote.backend).put
    dying = cut_after(real, 3, OSError("connection lost"))
    monkeypatch.setattr(type(remote.backend), "put", dying)
    with pytest.raises(OSError, match="connection lost"):
        push(repo.graph, repo.store, remote.backend, plan)
    monkeypatch.setattr(type(remote.backend), "put", real)
    assert remote.reopen().refs() == {}  # the ref moves last
    assert remote.reopen().has(dying.sent) == set(dying.sent)  # what arrived, arrived whole
    again = plan_push(repo.graph, repo.store, remote.reopen(), head, "refs/heads/main", False)
    assert sum(len(wave) for wave in again.chunks) == total - 3
    report = push(repo.graph, repo.store, remote.reopen(), again)
    assert report.chunks == total - 3 and remote.reopen().refs() == {"refs/heads/main": head}
    repo.close()


def _flipped(data: bytes) -> bytes:
    damaged = bytearray(data)
    damaged[-1] ^= 0xFF
    return bytes(damaged)


def test_tampered_bytes_are_rejected_when_read(remote, tmp_path):
    objects, (commit,) = git_commits(1)
    for key, data in objects:
        remote.backend.put(key, data)
    cid, record = raw_chunk(b"weights that will be damaged " * 100)
    remote.backend.put(chunk_key(cid), record)
    remote.tamper(object_key(commit), _flipped(dict(objects)[object_key(commit)]))
    remote.tamper(chunk_key(cid), _flipped(record))
    with pytest.raises(CorruptObjectError, match=commit[:12]):
        unpack_object(commit, remote.reopen().get(object_key(commit)))
    store = ChunkStore(tmp_path / "chunks")
    with pytest.raises(CorruptObjectError, match=cid[:12]):
        fetch_chunks(store, remote.reopen(), [cid], Transfer(), Bar())
    store.seal()
    assert not store.has(cid)
    graph_repo = Repository.init(tmp_path / "receiver")
    with pytest.raises(CorruptObjectError, match=commit[:12]):
        fetch_graph(graph_repo.graph, remote.reopen(), [commit], Transfer())
    assert not graph_repo.graph.has(commit)
    graph_repo.close()


BAD_NAMES = [
    "chunks/../../etc/passwd",
    "../outside",
    "/etc/passwd",
    "objects/" + "g" * 40,
    "objects/" + "a" * 39,
    "chunks/" + "a" * 64 + "/x",
    "refs/heads/../../outside",
    "refs/heads/a..b",
    "refs/heads/",
    "refs/remotes/origin/main",
    "lock",
    "",
]


def _refused(call) -> None:
    """``call`` is refused as a bad name: an error, and not "missing" (which would mean it was looked up)."""
    with pytest.raises(MgitError) as info:
        call()
    assert not isinstance(info.value, MissingObjectError), info.value


def test_names_outside_the_key_space_are_refused(remote, tmp_path):
    (head,) = put_commits(remote.backend, 1)
    backend = remote.backend
    for name in BAD_NAMES:
        _refused(lambda n=name: backend.get(n))
        _refused(lambda n=name: backend.put(n, b"x"))
        _refused(lambda n=name: backend.has([n]))
        _refused(lambda n=name: backend.sizes([n]))
        _refused(lambda n=name: backend.swap_ref(n, None, head))
    assert remote.reopen().refs() == {}
    assert not (tmp_path / "outside").exists() and not (tmp_path.parent / "outside").exists()


def test_bad_ref_values_and_clashing_names_are_refused(remote):
    """(Moved here from test_remote_hardening.py's directory and S3 tests.)"""
    error = _ref_error(remote)
    backend = remote.backend
    (head,) = put_commits(backend, 1)
    with pytest.raises(error, match="not a 40-hex commit id"):
        backend.swap_ref("refs/heads/x", None, "garbage")
    if remote.checks_graph:  # S3 checks the form only
        with pytest.raises(error, match="lacks that commit"):
            backend.swap_ref("refs/heads/x", None, "b" * 40)
    assert backend.swap_ref("refs/heads/main", None, head)
    with pytest.raises(error, match="clashes with the existing ref refs/heads/main"):
        backend.swap_ref("refs/heads/main/x", None, head)
    assert backend.swap_ref("refs/heads/x", None, head)


def test_only_branch_and_tag_names_move_as_refs(remote):
    """A key that is valid but no ref (an object's, a chunk's, HEAD) is refused by swap_ref and left
    as it was: before, the directory backend wrote the commit id over it (a corrupt remote)."""
    backend = remote.backend
    (head,) = put_commits(backend, 1)
    held = object_key(head)
    before = backend.get(held)
    for name in (held, "chunks/" + "c" * 64, "HEAD"):
        _refused(lambda n=name: backend.swap_ref(n, None, head))
    assert backend.get(held) == before
    assert remote.reopen().refs() == {}


def test_sketch_refs_move_and_are_listed_and_other_names_under_them_are_refused(remote):
    """A commit's sketch (refs/mgit/sketches/<40 hex>, mgit.ops.sketch) travels as a ref of its own."""
    backend = remote.backend
    a, b = put_commits(backend, 2)
    name = f"refs/mgit/sketches/{a}"
    assert backend.swap_ref(name, None, b)
    assert remote.reopen().refs() == {name: b}
    assert backend.swap_ref(name, b, a) and remote.reopen().refs() == {name: a}
    for bad in ("refs/mgit/sketches/main", f"refs/mgit/sketches/{a}/x", "refs/mgit/other", f"refs/mgit/{a}"):
        _refused(lambda n=bad: backend.swap_ref(n, None, a))
    assert remote.reopen().refs() == {name: a}
