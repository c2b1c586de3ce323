"""Loose git objects as mgit writes them (mgit.graph.objects._write_loose): with the shared
repository's permissions dulwich gives them, through a temporary name of their own (a lock
file a killed writer left never blocks a later write of the object), and a write that makes no
progress reports a full disk instead of spinning."""

from __future__ import annotations

import errno
import os
import stat

import pytest

from mgit.graph.objects import blob_id
from mgit.repo import Repository


def _shared(repo: Repository) -> Repository:
    config = repo.graph.repo.get_config()
    config.set(b"core", b"sharedRepository", b"group")
    config.write_to_path()
    root = repo.root
    repo.close()
    return Repository(root)


def test_objects_get_the_shared_repositorys_permissions(repo):
    """core.sharedRepository=group: object directories group-writable and setgid, objects
    group-readable, whatever the umask (as dulwich and git make them)."""
    repo = _shared(repo)
    data = b"shared\n"
    before = os.umask(0o077)
    try:
        sha = repo.graph.put_blob(data)
    finally:
        os.umask(before)
    directory = repo.git_dir / "objects" / sha[:2]
    mode = directory.stat().st_mode
    assert stat.S_IMODE(mode) & 0o070 == 0o070 and mode & stat.S_ISGID, oct(mode)
    assert stat.S_IMODE((directory / sha[2:]).stat().st_mode) & 0o040
    assert repo.graph.blob(sha) == data
    repo.close()


def test_a_lock_file_a_killed_writer_left_does_not_block_the_object(repo):
    """A SIGKILL mid-write left ``<id>.lock`` while the repository lock was released cleanly
    (so taking it looks only at refs): writing that object again works."""
    data = b"written twice\n"
    sha = blob_id(data)
    directory = repo.git_dir / "objects" / sha[:2]
    directory.mkdir(parents=True, exist_ok=True)
    (directory / f"{sha[2:]}.lock").write_bytes(b"half an obj")
    (repo.root / "x.txt").write_bytes(data)
    repo.add(["x.txt"])
    repo.commit("x")
    assert repo.graph.blob(sha) == data
    assert [p.name for p in directory.iterdir() if ".tmp-" in p.name] == []


def test_a_write_that_makes_no_progress_reports_a_full_disk(repo, monkeypatch):
    objects = str(repo.git_dir / "objects")
    fds: set[int] = set()
    calls: list[int] = []
    real_open, real_write, real_pwrite = os.open, os.write, os.pwrite

    def opening(path, flags, *args, **kwargs):
        fd = real_open(path, flags, *args, **kwargs)
        if os.fsdecode(path).startswith(objects) and flags & os.O_WRONLY:
            fds.add(fd)
        return fd

    def nothing(real):
        def write(fd, data, *args):
            if fd not in fds:
                return real(fd, data, *args)
            calls.append(fd)
            if len(calls) > 100:
                raise AssertionError("the write loop spins on writes of no bytes")
            return 0

        return write

    monkeypatch.setattr(os, "open", opening)
    monkeypatch.setattr(os, "write", nothing(real_write))
    monkeypatch.setattr(os, "pwrite", nothing(real_pwrite))
    with pytest.raises(OSError) as caught:
        repo.graph.put_blob(b"never written\n")
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC and caught.value.filename.startswith(objects)
    assert [p for p in (repo.git_dir / "objects").rglob("*") if p.is_file() and ".tmp-" in p.name] == []
