"""A working repository used as a remote: chunk sizes from its store without reading them, objects
checked against their ids as they arrive, `has` answered for a damaged loose object."""

from __future__ import annotations

import pytest
from helpers.models import TINY, commit_model, llama_state_dict

from mgit import Repository
from mgit.remote.backend import object_key

# -- item 8: a working repository as a remote sizes from the store, reads checked objects -------


def test_a_working_repository_sizes_chunks_without_reading_them(repo: Repository, monkeypatch) -> None:
    from mgit.remote.backend import chunk_key
    from mgit.remote.working import WorkingRepositoryBackend

    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    backend = WorkingRepositoryBackend(repo.root)
    keys = [chunk_key(c) for c in sorted(backend.store.ids())]
    want = {k: len(backend.get(k)) for k in keys}
    monkeypatch.setattr(type(backend.store), "export", lambda *a: pytest.fail("a chunk was read to size it"))
    assert backend.sizes(keys) == want


def test_a_working_repository_refuses_an_object_that_hashes_to_another_id(repo: Repository, monkeypatch) -> None:
    from mgit.errors import CorruptObjectError
    from mgit.remote.working import WorkingRepositoryBackend

    head = commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    backend = WorkingRepositoryBackend(repo.root)
    other = backend.graph.read(backend.graph.read(head).tree.decode())
    backend.graph.objects.pack_loose_objects()  # a whole loose object is read from its file, not the lookup
    real = type(backend.graph.objects).__getitem__
    monkeypatch.setattr(
        type(backend.graph.objects), "__getitem__", lambda self, sha: other if sha == head.encode() else real(self, sha)
    )
    with pytest.raises(CorruptObjectError, match=f"object {head[:12]} is damaged"):
        backend.get(object_key(head))


def test_a_working_repository_answers_has_for_a_damaged_loose_object(repo: Repository) -> None:
    from mgit.remote.working import WorkingRepositoryBackend

    head = commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    loose = repo.git_dir / "objects" / head[:2] / head[2:]
    assert loose.is_file()
    loose.chmod(0o644)
    loose.write_bytes(b"not zlib at all")
    backend = WorkingRepositoryBackend(repo.root)
    assert backend.has([object_key(head)]) == {object_key(head)}


def test_a_push_reads_the_checked_out_branch_while_another_push_deletes_a_ref(repo: Repository, monkeypatch) -> None:
    """Which branch is checked out comes from HEAD alone: a ref another push deletes while this
    one lists the refs (here: listed, then gone) must not fail the push."""
    from mgit.remote.working import WorkingRepositoryBackend

    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    backend = WorkingRepositoryBackend(repo.root)
    refs = backend.graph.repo.refs
    listed = refs.allkeys
    monkeypatch.setattr(refs, "allkeys", lambda: {*listed(), b"refs/heads/deleted-meanwhile"})
    assert backend.head() == "main"
    backend.check_push("refs/heads/other")  # not the checked-out branch: allowed


def test_a_failed_seal_still_releases_the_repositorys_lock(repo: Repository, monkeypatch) -> None:
    """``close`` publishes what was received, then unlocks: a seal that fails (a full disk) must
    not leave the repository locked for every later command."""
    from mgit.remote.working import WorkingRepositoryBackend

    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    backend = WorkingRepositoryBackend(repo.root)
    backend._writing()

    def full_disk() -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(backend.store, "seal", full_disk)
    with pytest.raises(OSError, match="No space left"):
        backend.close()
    again = WorkingRepositoryBackend(repo.root)
    again._writing()  # took the lock: the first backend gave it back
    again.close()
