"""``Backend.sizes`` (what fetching costs, asked before fetching) beyond the backend contract
(tests/contract/ proves every backend's sizes): HTTP's auth, ``fetch_costs``, budgets, and hostile
replies to the HTTP ``.sizes`` endpoint."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from helpers.models import commit_model, llama_state_dict, tree_hashes

from mgit import Repository
from mgit.errors import AuthError, RemoteError
from mgit.remote.http import HttpBackend
from mgit.remote.local import DirectoryBackend
from mgit.remote.server import MgitServer
from mgit.remote.transfer import chunks_of, fetch_costs

TOKENS = {"read-token": "ro", "write-token": "rw"}


@pytest.fixture
def pushed(tmp_path):
    """A committed model pushed to a directory remote; (repo, remote directory, its keys)."""
    repo = Repository.init(tmp_path / "work")
    commit_model(repo, llama_state_dict(), "base")
    remote = tmp_path / "served" / "llama"
    repo.remote_add("origin", str(remote))
    repo.push()
    keys = sorted(p.relative_to(remote).as_posix() for p in remote.rglob("*") if p.parent.name in ("chunks", "objects"))
    yield repo, remote, keys
    repo.close()


def expected_sizes(remote, keys) -> dict[str, int]:
    return {k: (remote / k).stat().st_size for k in keys}


@pytest.fixture
def server(tmp_path):
    (tmp_path / "served").mkdir(exist_ok=True)
    srv = MgitServer(tmp_path / "served", port=0, tokens=TOKENS)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield srv
    srv.shutdown()
    srv.server_close()


def test_fetch_costs_are_remote_record_sizes_and_zero_for_chunks_here(pushed, tmp_path):
    repo, remote, _ = pushed
    chunks = sorted(chunks_of(repo.graph, [repo.refs.head()]))
    partial = Repository.clone(str(remote), tmp_path / "partial", partial=True)
    assert fetch_costs(partial.store, DirectoryBackend(remote), chunks) == dict.fromkeys(chunks, 0)  # all here
    empty = Repository.init(tmp_path / "empty")
    assert fetch_costs(empty.store, DirectoryBackend(remote), chunks) == {
        c: (remote / "chunks" / c).stat().st_size for c in chunks
    }
    with pytest.raises(RemoteError, match="lacks chunk 000000000000"):
        fetch_costs(empty.store, DirectoryBackend(remote), ["0" * 64])


def test_http_sizes_with_the_same_auth_as_has(pushed, server, monkeypatch):
    _, remote, keys = pushed
    url = f"{server.url}/llama"
    assert HttpBackend(url, "read-token").sizes(keys + ["chunks/" + "1" * 64]) == expected_sizes(remote, keys)
    assert HttpBackend(f"{server.url}/nothing-here", "read-token").sizes(keys) == {}
    with pytest.raises(AuthError, match="valid token"):
        HttpBackend(url).sizes(keys)
    with pytest.raises(RemoteError, match="not a valid remote object name"):
        HttpBackend(url, "read-token").sizes(["../../etc/passwd"])


def test_http_partial_clone_checks_out_within_a_budget(pushed, server, tmp_path, monkeypatch):
    repo, _, _ = pushed
    monkeypatch.setenv("MGIT_TOKEN", "read-token")
    partial = Repository.clone(f"{server.url}/llama", tmp_path / "p", partial=True, branch="main")
    partial.checkout("main", include=["model.norm.weight"])
    repo.checkout(create_branch="grown")
    commit_model(repo, llama_state_dict(seed=9), "another model")
    repo.push("origin", "grown")  # origin: the served directory itself
    partial.fetch()
    res = partial.checkout("grown", budget="50MB", full=True)
    assert 0 < res.bytes_fetched and res.bytes_read + res.bytes_fetched <= 50 * 10**6
    assert tree_hashes(partial.root) == tree_hashes(repo.root)


def _hostile(reply: bytes, status: int = 200):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):
            self.rfile.read(int(self.headers.get("Content-Length", 0)))
            self.send_response(status)
            self.send_header("Content-Length", str(len(reply)))
            self.end_headers()
            self.wfile.write(reply)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


KEY = "chunks/" + "a" * 64


@pytest.mark.parametrize(
    ("reply", "message"),
    [
        (b"<html>not json</html>", "malformed size list"),
        (json.dumps([KEY]).encode(), "malformed size list"),
        (json.dumps({KEY: -5}).encode(), "malformed size"),
        (json.dumps({KEY: "12"}).encode(), "malformed size"),
        (json.dumps({KEY: True}).encode(), "malformed size"),
        (json.dumps({KEY: 1.5}).encode(), "malformed size"),
        (json.dumps({"chunks/" + "b" * 64: 10}).encode(), "not asked for"),
    ],
)
def test_hostile_sizes_replies_are_one_clear_error(reply, message):
    server = _hostile(reply)
    try:
        with pytest.raises(RemoteError, match=message) as info:
            HttpBackend(f"http://127.0.0.1:{server.server_address[1]}/repo").sizes([KEY])
        assert "\n" not in str(info.value)
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_without_sizes_says_so():
    server = _hostile(b'{"error": "no such object"}', status=404)
    try:
        with pytest.raises(RemoteError, match="does not answer size queries"):
            HttpBackend(f"http://127.0.0.1:{server.server_address[1]}/repo").sizes([KEY])
    finally:
        server.shutdown()
        server.server_close()
