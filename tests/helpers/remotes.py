"""Helpers for tests of remotes: a backend ``put`` that dies part-way through a push, an upload
whose connection dies part-way through its body, a count of a server's connections, and the
remotes the backend contract suite (tests/contract/) runs against, each with what a test
needs around the Backend itself."""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dulwich.objects import Blob, Commit, Tree

from mgit.remote.backend import Backend, object_key, pack_chunk, pack_object
from mgit.store import codec
from mgit.store.chunkstore import chunk_id
from mgit.store.pack import Record

Put = Callable[[Any, str, bytes], None]


def cut_after(put: Put, chunks: int, error: Exception) -> Any:
    """A backend ``put`` that lets the first ``chunks`` chunks through, then fails every later
    one with ``error`` (a connection lost mid-push); ``.sent`` lists the keys that arrived."""
    lock, sent = threading.Lock(), list[str]()

    def dying(self: Any, key: str, data: bytes) -> None:
        with lock:
            if key.startswith("chunks/") and sum(k.startswith("chunks/") for k in sent) >= chunks:
                raise error
            sent.append(key)
        put(self, key, data)

    dying.sent = sent  # type: ignore[attr-defined]
    return dying


def connections_accepted(server: Any, monkeypatch: Any) -> list[object]:
    """A list that grows by one for each connection ``server`` (a socketserver) accepts from now
    on, a refused one (503) included."""
    accepted: list[object] = []
    serve = server.process_request

    def counting(request: Any, client_address: Any) -> None:
        accepted.append(client_address)
        serve(request, client_address)

    monkeypatch.setattr(server, "process_request", counting)
    return accepted


def truncated_upload(host: str, port: int, path: str, data: bytes) -> bytes:
    """PUT ``data`` to ``path`` announcing its whole length, send a tenth of it and close the
    sending side (a client killed mid-upload); what the server answered, if anything."""
    with socket.create_connection((host, port), timeout=10) as s:
        head = f"PUT {path} HTTP/1.1\r\nHost: {host}\r\nContent-Length: {len(data)}\r\n\r\n".encode()
        s.sendall(head + data[: max(1, len(data) // 10)])
        s.shutdown(socket.SHUT_WR)
        reply = b""
        try:
            while chunk := s.recv(4096):
                reply += chunk
        except OSError:
            pass
    return reply


@dataclass
class Remote:
    """One remote of the contract suite: ``backend`` a client of it, and around it what only a
    test does — ``reopen`` (another client of the same remote: a second pusher, a fresh listing),
    ``tamper`` (replace the bytes held for a key behind the backend's back), ``die_mid_put``
    (an upload of a key that dies part-way, as that kind of remote can die), ``checks_graph``
    (swap_ref refuses a commit it does not hold with its graph; S3 checks the value's form only,
    reading every object a commit reaches would cost a GET each), ``checked_out`` (a working
    repository's own branch: HEAD names it and a push into it is refused), ``locks`` (a pusher
    holds the remote's lock, so of concurrent pushers the others fail with LockedError, as
    ``git push`` into a repository whose ref is locked fails)."""

    kind: str
    backend: Backend
    reopen: Callable[[], Backend]
    tamper: Callable[[str, bytes], None]
    die_mid_put: Callable[[str, bytes], None]
    checks_graph: bool = True
    checked_out: str | None = None
    locks: bool = False


# -- what the suite stores --------------------------------------------------------------------


def git_commits(n: int) -> tuple[list[tuple[str, bytes]], list[str]]:
    """(every (key, bytes) to put, ids) for ``n`` root commits of one file's tree, each its own id."""
    blob = Blob.from_string(b"weights\n")
    tree = Tree()
    tree.add(b"model.bin", 0o100644, blob.id)
    objects: list[tuple[str, bytes]] = [(object_key(o.id.decode()), pack_object(o)) for o in (blob, tree)]
    ids = []
    for i in range(n):
        c = Commit()
        c.tree = tree.id
        c.author = c.committer = b"Ada <ada@example.com>"
        c.author_time = c.commit_time = 1_700_000_000 + i
        c.author_timezone = c.commit_timezone = 0
        c.message = f"commit {i}\n".encode()
        objects.append((object_key(c.id.decode()), pack_object(c)))
        ids.append(c.id.decode())
    return objects, ids


def put_commits(backend: Backend, n: int) -> list[str]:
    """``n`` commits the remote holds with their whole graph (what a ref may name)."""
    objects, ids = git_commits(n)
    for key, data in objects:
        backend.put(key, data)
    return ids


def raw_chunk(raw: bytes) -> tuple[str, bytes]:
    """(chunk id, the record as sent) for a chunk stored raw."""
    cid = chunk_id(raw)
    return cid, pack_chunk(Record(cid, codec.RAW, 1, 0, len(raw), raw, None))
