"""`mgit serve` on 127.0.0.1 (started by a fixture on a free port) and the HTTP backend."""

from __future__ import annotations

import http.client
import json
import socket
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
from helpers.models import commit_model, frozen_finetune, llama_state_dict, touch_later, tree_hashes, write_model
from helpers.remotes import connections_accepted
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import AuthError, RemoteError
from mgit.remote import http as http_backend
from mgit.remote.backend import pack_chunk
from mgit.remote.http import HttpBackend
from mgit.remote.local import DirectoryBackend
from mgit.remote.server import MgitServer
from mgit.remote.transfer import TRANSFER_THREADS
from mgit.store.record import Record

TOKENS = {"read-token": "ro", "write-token": "rw"}


@pytest.fixture
def server(tmp_path):
    (tmp_path / "served").mkdir()
    srv = MgitServer(tmp_path / "served", port=0, tokens=TOKENS)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def work(tmp_path):
    repo = Repository.init(tmp_path / "work")
    base = llama_state_dict()
    write_model(repo.root / "model", base)
    repo.add(["model"])
    repo.commit("base")
    return repo, base


def _raw(srv: MgitServer, method: str, path: str, body: bytes | None = None, token: str = "write-token"):
    conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=10)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    conn.request(method, path, body=body, headers=headers)
    response = conn.getresponse()
    return response.status, response.read()


def test_push_and_clone_over_http_round_trip(server, work, tmp_path, monkeypatch):
    repo, base = work
    monkeypatch.setenv("MGIT_TOKEN", "write-token")
    repo.remote_add("origin", f"{server.url}/team/llama")
    first = repo.push()
    assert first.chunks > 0
    write_model(repo.root / "model", frozen_finetune(base, {0, 1}, seed=3))
    touch_later(repo.root / "model" / "model.safetensors")
    repo.add(["model"])
    repo.commit("fine-tune")
    second = repo.push()
    assert 0 < second.chunks < first.chunks and second.present_chunks > 0
    monkeypatch.setenv("MGIT_TOKEN", "read-token")
    clone = Repository.clone(f"{server.url}/team/llama", tmp_path / "clone")
    assert tree_hashes(clone.root) == tree_hashes(repo.root) and clone.fsck() == []
    partial = Repository.clone(f"{server.url}/team/llama", tmp_path / "partial", partial=True)
    assert tree_hashes(partial.root) == tree_hashes(repo.root)


def test_tokens_are_required_and_read_only_tokens_cannot_push(server, work, tmp_path, monkeypatch):
    repo, _ = work
    repo.remote_add("origin", f"{server.url}/llama")
    monkeypatch.delenv("MGIT_TOKEN", raising=False)
    with pytest.raises(AuthError, match="valid token"):
        repo.push()
    monkeypatch.setenv("MGIT_TOKEN", "read-token")
    with pytest.raises(AuthError, match="read-only"):
        repo.push()
    token_file = tmp_path / "token"
    token_file.write_text("write-token\n")
    monkeypatch.delenv("MGIT_TOKEN")
    repo.remote_add("withfile", f"{server.url}/llama", token_file=str(token_file))
    assert repo.push("withfile").chunks > 0


def test_the_server_stays_inside_its_root(server, tmp_path):
    (tmp_path / "secret").write_text("do not serve")
    for path in (
        "/../secret",
        "/a/../../secret",
        "/../objects/" + "0" * 40,
        "/.hidden/objects/" + "0" * 40,
        "/x/objects/../../../secret",
        "/x/chunks/zz",
    ):
        status, body = _raw(server, "GET", path)
        assert status in (400, 404) and b"do not serve" not in body
    status, _ = _raw(server, "PUT", "/../evil/objects/" + "1" * 40, b"x")
    assert status == 400 and not (tmp_path / "evil").exists()


def test_uploads_are_checked_limited_and_never_half_visible(server):
    cid = "ab" * 32
    bogus = pack_chunk(Record(cid, 0, 1, 0, 5, b"hello"))  # "hello" is not the chunk ab…ab
    status, body = _raw(server, "PUT", f"/repo/chunks/{cid}", bogus)
    assert status == 400 and b"does not match" in body
    assert _raw(server, "GET", f"/repo/chunks/{cid}")[0] == 404
    assert not (server.root / "repo").exists()  # a refused upload creates no repository either
    server.max_body = 1000
    assert _raw(server, "PUT", "/repo/objects/" + "2" * 40, b"x" * 2000)[0] == 413
    # a client dying mid-upload: headers promise 1000 bytes, 10 arrive, the socket closes
    with socket.create_connection(server.server_address[:2]) as s:
        s.sendall(
            b"PUT /repo/objects/" + b"3" * 40 + b" HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer write-token\r\n"
            b"Content-Length: 1000\r\n\r\n" + b"x" * 10
        )
    assert _raw(server, "GET", "/repo/objects/" + "3" * 40)[0] == 404


def test_unreachable_server_is_one_clear_line(work):
    repo, _ = work
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    url = f"http://127.0.0.1:{port}/x"
    repo.remote_add("gone", url)
    with pytest.raises(RemoteError) as refused:
        repo.push("gone")
    # the socket's words, not urllib3's wrappers (pools, connection objects, "Max retries")
    assert str(refused.value) == f"cannot reach {url}: [Errno 111] Connection refused; is `mgit serve` running?"


def test_cli_serve_push_clone(tmp_path, work):
    repo, _ = work
    (tmp_path / "root").mkdir()
    (tmp_path / "tokens").write_text("rw secret\n")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    import subprocess
    import sys
    import time

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mgit",
            "serve",
            str(tmp_path / "root"),
            "--port",
            str(port),
            "--token-file",
            str(tmp_path / "tokens"),
        ],
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.time() + 30
        while time.time() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.1)
        env = {"MGIT_TOKEN": "secret"}
        run_mgit("remote", "add", "web", f"http://127.0.0.1:{port}/m", cwd=repo.root, check=True)
        run_mgit("push", "web", cwd=repo.root, check=True, env=env)
        run_mgit("clone", f"http://127.0.0.1:{port}/m", str(tmp_path / "c"), cwd=tmp_path, check=True, env=env)
        assert tree_hashes(tmp_path / "c") == tree_hashes(repo.root)
        denied = run_mgit("clone", f"http://127.0.0.1:{port}/m", str(tmp_path / "d"), cwd=tmp_path)
        assert denied.returncode != 0 and "token" in denied.stderr and "Traceback" not in denied.stderr
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_read_only_token_cannot_swap_refs_however_the_path_is_written(server, work, monkeypatch):
    repo, _ = work
    monkeypatch.setenv("MGIT_TOKEN", "write-token")
    repo.remote_add("origin", f"{server.url}/llama")
    repo.push()
    head = repo.resolve("HEAD")
    for path in ("/llama/.swap", "/llama/.swap?x=1", "/llama/.swap/?x=1", "/llama/.swap?"):
        for ref, new in (("refs/heads/main", None), ("refs/heads/evil", head)):
            old = head if ref == "refs/heads/main" else None
            body = json.dumps({"ref": ref, "old": old, "new": new}).encode()
            status, _ = _raw(server, "POST", path, body, token="read-token")
            assert status == 403, (path, ref, status)
    assert set(repo._backend("origin").refs()) == {"refs/heads/main"}
    status, body = _raw(server, "POST", "/llama/.sizes", json.dumps(["refs/heads/main/x"]).encode(), "read-token")
    assert status == 200 and json.loads(body) == {}  # a key under a file: absent, not a crash


@pytest.mark.parametrize("endpoint", [".has", ".sizes"])
def test_malformed_keys_are_bad_requests_not_server_failures(server, work, monkeypatch, endpoint):
    """A key no remote may hold (odd characters, ``..``, a bad ref name) is the client's error:
    400 with a one-line reason, for each endpoint taking keys (.swap's ref too)."""
    repo, _ = work
    monkeypatch.setenv("MGIT_TOKEN", "write-token")
    repo.remote_add("origin", f"{server.url}/llama")
    repo.push()
    for key in ("objects/zz", "../../etc/passwd", "chunks/" + "g" * 64, "refs/heads/a..b", "HEAD/x", ""):
        status, body = _raw(server, "POST", f"/llama/{endpoint}", json.dumps(["HEAD", key]).encode())
        assert status == 400, (key, status, body)
        assert body.count(b"\n") <= 1 and "error" in json.loads(body), body
    swap = json.dumps({"ref": "objects/zz", "old": None, "new": None}).encode()
    status, body = _raw(server, "POST", "/llama/.swap", swap)
    assert status == 400 and "error" in json.loads(body), body


# -- the client's connections (urllib3's pool and Retry) ---------------------------------------


@pytest.fixture
def pushed(server, work, monkeypatch):
    """``server`` holding the pushed ``work`` at /llama: (repository, its HttpBackend)."""
    repo, _ = work
    monkeypatch.setenv("MGIT_TOKEN", "write-token")
    repo.remote_add("origin", f"{server.url}/llama")
    repo.push()
    return repo, HttpBackend(f"{server.url}/llama", "write-token")


def test_the_threads_of_a_transfer_share_a_bounded_pool(server, pushed, monkeypatch, caplog):
    """Many threads on one backend (a push's or a fetch's) share at most TRANSFER_THREADS
    kept-alive connections: a thread beyond them waits for one, none is opened and thrown away."""
    repo, backend = pushed
    accepted = connections_accepted(server, monkeypatch)
    with ThreadPoolExecutor(4 * TRANSFER_THREADS) as pool:
        answers = list(pool.map(lambda _: backend.refs(), range(16 * TRANSFER_THREADS)))
    assert all(refs == {"refs/heads/main": repo.resolve("HEAD")} for refs in answers)
    assert 0 < len(accepted) <= TRANSFER_THREADS
    assert "pool is full" not in caplog.text


def test_a_swap_sent_again_after_its_answer_was_lost_is_not_reported_lost(server, pushed, monkeypatch):
    """The server moves the ref, then the connection drops before its answer: the swap is sent
    again and finds the ref moved (409), by this push itself, which therefore succeeded."""
    repo, backend = pushed
    child = commit_model(repo, frozen_finetune(llama_state_dict(), {0}, seed=5), "child")
    swap, dropped = DirectoryBackend.swap_ref, []

    def applied_then_dropped(self, name, old, new):
        moved = swap(self, name, old, new)
        if not dropped:
            dropped.append(name)
            raise ConnectionResetError("the answer is lost")  # mgit serve closes without answering
        return moved

    monkeypatch.setattr(DirectoryBackend, "swap_ref", applied_then_dropped)
    assert repo.push().refs == {"refs/heads/main": (repo.resolve("HEAD~1"), child)}
    assert dropped and backend.refs() == {"refs/heads/main": child}
    assert not backend.swap_ref("refs/heads/main", repo.resolve("HEAD~1"), child)  # not resent: a lost swap


def test_a_refused_reply_gives_its_connection_back(server, pushed, monkeypatch):
    """A reply over MAX_REPLY_BYTES is cut off unread: its connection is closed, and its place
    in the pool given back (else, past TRANSFER_THREADS refusals, every request would wait)."""
    _, backend = pushed
    monkeypatch.setattr(http_backend, "MAX_REPLY_BYTES", 60)  # {"refs/heads/main": "<40 hex>"} is 62
    accepted = connections_accepted(server, monkeypatch)
    heads = []

    def refuse_then_read() -> None:
        for _ in range(TRANSFER_THREADS + 1):
            with pytest.raises(RemoteError, match="more than 60 bytes for .refs; refusing it"):
                backend.refs()
        heads.append(backend.head())

    reader = threading.Thread(target=refuse_then_read, daemon=True)
    reader.start()
    reader.join(60)
    assert heads == ["main"], "a refused reply kept its connection out of the pool"
    assert len(accepted) == TRANSFER_THREADS + 2  # each refusal's connection closed, none reused
