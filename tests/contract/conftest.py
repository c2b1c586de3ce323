"""The remotes the backend contract suite runs against: one fixture, ``remote``, parametrized over
every Backend (adding a backend is one more branch here). Servers listen on 127.0.0.1 on a free
port and are stopped by their fixtures."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import dulwich.file
import pytest
from helpers.remotes import Remote, truncated_upload

from mgit import Repository
from mgit.remote.http import HttpBackend
from mgit.remote.local import DirectoryBackend
from mgit.remote.memory import MemoryBackend
from mgit.remote.s3 import S3Backend
from mgit.remote.server import MgitServer
from mgit.remote.working import WorkingRepositoryBackend
from mgit.store.chunkstore import ChunkStore
from mgit.store.pack import PackWriter

KINDS = ["memory", "directory", "working", "http", pytest.param("s3", marks=pytest.mark.slow)]  # moto: seconds a test


@pytest.fixture(scope="module")
def mgit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MgitServer]:
    """`mgit serve`'s server (no tokens: every request allowed) in a thread, for the module."""
    srv = MgitServer(tmp_path_factory.mktemp("served"), port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


CHECKED_OUT = "checked-out"  # the working repository's branch; the suite pushes every other name


class _Unreadable:
    """Bytes that cannot be read to the end (the source failed mid-put)."""

    def __bytes__(self) -> bytes:
        raise OSError("connection lost")


def _memory() -> Remote:
    backend = MemoryBackend()

    def tamper(key: str, data: bytes) -> None:
        backend.stored[key] = data

    def die_mid_put(key: str, data: bytes) -> None:
        with pytest.raises(OSError):
            backend.put(key, _Unreadable())  # type: ignore[arg-type]

    return Remote("memory", backend, lambda: backend, tamper, die_mid_put)


def _directory(root: Path, monkeypatch: pytest.MonkeyPatch) -> Remote:
    def tamper(key: str, data: bytes) -> None:
        (root / key).write_bytes(data)

    def die_mid_put(key: str, data: bytes) -> None:
        def failing(fd: int) -> None:
            raise OSError(5, "Input/output error")

        with monkeypatch.context() as m, pytest.raises(OSError):
            m.setattr(os, "fsync", failing)  # written, not yet renamed into place
            DirectoryBackend(root).put(key, data)

    return Remote("directory", DirectoryBackend(root, create=True), lambda: DirectoryBackend(root), tamper, die_mid_put)


def _working(root: Path, monkeypatch: pytest.MonkeyPatch) -> Remote:
    """A working repository, as `git clone /path/to/repo` takes one: its own branch checked out
    (unborn; a push into it is refused), every other branch and tag pushed into its graph."""
    Repository.init(root).close()
    (root / ".mgit" / "HEAD").write_text(f"ref: refs/heads/{CHECKED_OUT}\n")

    def tamper(key: str, data: bytes) -> None:
        kind, _, name = key.partition("/")
        if kind == "objects":  # a loose object's file holds what the wire carries
            path = root / ".mgit" / "objects" / name[:2] / name[2:]
            path.unlink()
            path.write_bytes(data)
            return
        backend.close()
        store = ChunkStore(root / ".mgit" / "chunks")
        loc = store.locate(name)
        assert loc is not None
        with open(loc.pack, "r+b") as f:  # the stored record's last byte, damaged as the wire's
            f.seek(loc.offset + loc.length - 1)
            last = f.read(1)[0]
            f.seek(-1, os.SEEK_CUR)
            f.write(bytes([last ^ 0xFF]))

    def die_mid_put(key: str, data: bytes) -> None:
        def half_then_fail(real: Callable[[Any, bytes], Any]) -> Callable[[Any, bytes], Any]:
            def write(self: Any, b: bytes) -> Any:
                real(self, b[: len(b) // 2])
                raise OSError(5, "Input/output error")

            return write

        dying = WorkingRepositoryBackend(root)
        with monkeypatch.context() as m, pytest.raises(OSError):  # the write of an object or a chunk fails half-way
            m.setattr(dulwich.file._GitFile, "write", half_then_fail(dulwich.file._GitFile.write))
            m.setattr(PackWriter, "_write", half_then_fail(PackWriter._write))
            dying.put(key, data)
        dying.close()  # the lock it took is released

    backend = WorkingRepositoryBackend(root)

    def reopen() -> WorkingRepositoryBackend:
        backend.close()  # what it received is published, as at the end of a push
        return WorkingRepositoryBackend(root)

    return Remote("working", backend, reopen, tamper, die_mid_put, checked_out=CHECKED_OUT, locks=True)


def _http(srv: MgitServer) -> Remote:
    name = f"r-{uuid.uuid4().hex[:8]}"
    url = f"{srv.url}/{name}"

    def tamper(key: str, data: bytes) -> None:
        (Path(srv.root) / name / key).write_bytes(data)

    def die_mid_put(key: str, data: bytes) -> None:
        host, port = srv.server_address[:2]
        truncated_upload(str(host), int(port), f"/{name}/{key}", data)

    return Remote("http", HttpBackend(url), lambda: HttpBackend(url), tamper, die_mid_put)


def _s3(endpoint: str, monkeypatch: pytest.MonkeyPatch) -> Remote:
    import boto3

    for k, v in {
        "AWS_ENDPOINT_URL": endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }.items():
        monkeypatch.setenv(k, v)
    bucket = f"mgit-{uuid.uuid4().hex[:12]}"
    client = boto3.client("s3")
    client.create_bucket(Bucket=bucket)
    url = f"s3://{bucket}/models/llama"

    def tamper(key: str, data: bytes) -> None:
        client.put_object(Bucket=bucket, Key=f"models/llama/{key}", Body=data)

    def die_mid_put(key: str, data: bytes) -> None:
        where = urlsplit(endpoint)
        truncated_upload(where.hostname or "127.0.0.1", where.port or 80, f"/{bucket}/models/llama/{key}", data)

    return Remote("s3", S3Backend(url), lambda: S3Backend(url), tamper, die_mid_put, checks_graph=False)


@pytest.fixture(params=KINDS)
def remote(request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Remote]:
    """A fresh, empty remote of each kind."""
    kind = request.param
    if kind == "memory":
        made = _memory()
    elif kind == "directory":
        made = _directory(tmp_path / "remote", monkeypatch)
    elif kind == "working":
        made = _working(tmp_path / "remote", monkeypatch)
    elif kind == "http":
        made = _http(request.getfixturevalue("mgit_server"))
    else:
        made = _s3(request.getfixturevalue("s3_endpoint"), monkeypatch)
    yield made
    made.backend.close()
