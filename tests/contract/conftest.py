"""The remotes the backend contract suite runs against: one fixture, ``remote``, parametrized over
every Backend (adding a backend is one more branch here). Servers listen on 127.0.0.1 on a free
port and are stopped by their fixtures."""

from __future__ import annotations

import os
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from helpers.remotes import Remote, truncated_upload

from mgit.remote.http import HttpBackend
from mgit.remote.local import DirectoryBackend
from mgit.remote.memory import MemoryBackend
from mgit.remote.s3 import S3Backend
from mgit.remote.server import MgitServer

KINDS = ["memory", "directory", "http", "s3"]


@pytest.fixture(scope="module")
def mgit_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MgitServer]:
    """`mgit serve`'s server (no tokens: every request allowed) in a thread, for the module."""
    srv = MgitServer(tmp_path_factory.mktemp("served"), port=0)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


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

    for k, v in {"AWS_ENDPOINT_URL": endpoint, "AWS_ACCESS_KEY_ID": "test", "AWS_SECRET_ACCESS_KEY": "test",
                 "AWS_DEFAULT_REGION": "us-east-1"}.items():  # fmt: skip
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
    elif kind == "http":
        made = _http(request.getfixturevalue("mgit_server"))
    else:
        made = _s3(request.getfixturevalue("s3_endpoint"), monkeypatch)
    yield made
    made.backend.close()
