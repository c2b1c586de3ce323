"""Remotes against hostile or broken input: `mgit serve` answers every request (status and a
one-line reason), times out idle clients and bounds its connections; ref updates must name a
commit the remote holds; chunk records cannot declare more than a chunk may hold (decompression
bombs); S3 errors are one line naming what to fix; a working repository can be cloned.

Servers listen on 127.0.0.1 on a free port and are stopped by their fixtures."""

from __future__ import annotations

import http.client
import json
import re
import socket
import struct
import threading
import time
import tracemalloc
import zlib
from pathlib import Path

import pytest
import zstandard
from helpers.cli import invoke
from helpers.models import commit_model, frozen_finetune, llama_state_dict, tree_hashes
from helpers.remotes import connections_accepted
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import AuthError, BadInputError, CorruptObjectError, MgitError, RemoteError
from mgit.graph.formats import FORMAT_VERSION, mark_format, read_format
from mgit.progress import Bar
from mgit.remote import http as http_backend
from mgit.remote.backend import pack_chunk
from mgit.remote.http import HttpBackend
from mgit.remote.local import DirectoryBackend
from mgit.remote.s3 import S3Backend
from mgit.remote.server import BUSY, MgitServer
from mgit.remote.transfer import Transfer, fetch_chunks
from mgit.store import codec
from mgit.store.chunkstore import ChunkStore
from mgit.store.record import Record, chunk_id

NESTED = b"[" * 100_000 + b"]" * 100_000
BOMB_RAW = 64 * 2**20  # what the crafted frames decompress to: 16x the largest chunk


def start(root: Path, **options) -> MgitServer:
    srv = MgitServer(root, port=0, **options)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv


def stop(srv: MgitServer) -> None:
    srv.shutdown()
    srv.server_close()


@pytest.fixture
def served(tmp_path):
    """A server holding one pushed repository at /llama: (server, repository, pushed commit)."""
    (tmp_path / "served").mkdir()
    srv = start(tmp_path / "served", idle_timeout=5)
    repo = Repository.init(tmp_path / "work")
    head = commit_model(repo, llama_state_dict(), "base")
    repo.remote_add("origin", f"{srv.url}/llama")
    repo.push()
    yield srv, repo, head
    stop(srv)


def request(srv: MgitServer, method: str, path: str, body: bytes | None = None) -> tuple[int, dict]:
    conn = http.client.HTTPConnection(*srv.server_address[:2], timeout=10)
    try:
        conn.request(method, path, body=body)
        response = conn.getresponse()
        data = response.read()
    finally:
        conn.close()
    return response.status, json.loads(data) if data else {}


def one_line_error(reply: dict) -> str:
    message = reply["error"]
    assert isinstance(message, str) and message and "\n" not in message and "Traceback" not in message
    return message


# -- item 26/31: every request is answered ----------------------------------------------------


@pytest.mark.parametrize("endpoint", [".has", ".sizes", ".swap"])
@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (NESTED, "nested too deeply"),
        (b"\xff\xfe not json", "not JSON"),
        (b'{"a": ', "not JSON"),
        (b"42", "expected"),
        (b'[1, 2, {"x": []}]', "expected"),
        (b'{"ref": ["refs/heads/main"]}', "expected"),
    ],
)
def test_malformed_bodies_get_400_with_one_line(served, endpoint, body, reason):
    srv, _, _ = served
    status, reply = request(srv, "POST", f"/llama/{endpoint}", body)
    assert status == 400
    assert reason in one_line_error(reply)


@pytest.mark.parametrize(
    "body",
    [
        {"ref": "refs/heads/../../x", "old": None, "new": "a" * 40},
        {"ref": "refs/heads/a..b", "old": None, "new": "a" * 40},
        {"ref": "refs/heads/", "old": None, "new": "a" * 40},
        {"ref": "HEAD", "old": None, "new": "a" * 40},
        {"ref": "refs/heads/x", "old": 7, "new": "a" * 40},
        {"ref": 5, "old": None, "new": "a" * 40},
    ],
)
def test_bad_ref_names_and_fields_get_400(served, body):
    srv, _, _ = served
    status, reply = request(srv, "POST", "/llama/.swap", json.dumps(body).encode())
    assert status == 400
    one_line_error(reply)


def test_a_ref_under_a_ref_is_refused_and_reads_of_it_are_404(served, tmp_path):
    srv, repo, head = served
    for ref in ("refs/heads/main/x", "refs/heads/main/x/y"):
        status, reply = _swap(srv, head, ref)
        assert status == 400 and "clashes with the existing ref refs/heads/main" in one_line_error(reply)
        assert request(srv, "GET", f"/llama/{ref}")[0] == 404
    assert request(srv, "POST", "/llama/.has", json.dumps(["refs/heads/main/x"]).encode()) == (200, [])
    assert request(srv, "POST", "/llama/.sizes", json.dumps(["refs/heads/main/x"]).encode()) == (200, {})
    # and the other way round: a ref where refs live under that name
    good = {"ref": "refs/heads/topic/a", "old": None, "new": head}
    assert request(srv, "POST", "/llama/.swap", json.dumps(good).encode())[0] == 200
    clash = {"ref": "refs/heads/topic", "old": None, "new": head}
    status, reply = request(srv, "POST", "/llama/.swap", json.dumps(clash).encode())
    assert status == 400 and "refs/heads/topic/a" in one_line_error(reply)
    assert tree_hashes(Repository.clone(f"{srv.url}/llama", tmp_path / "clone").root) == tree_hashes(repo.root)


def test_a_path_through_a_file_or_a_non_remote_is_400(served, tmp_path):
    srv, _, _ = served
    (tmp_path / "served" / "notes").mkdir()
    (tmp_path / "served" / "notes" / "todo.txt").write_text("x")
    blob = zlib.compress(b"blob 0\x00")
    for path in (
        "/llama/mgit-remote/objects/e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
        "/notes/objects/e69de29bb2d1d6434b8b29ae775ad8c2e48c5391",
    ):
        status, reply = request(srv, "PUT", path, blob)
        assert status == 400, reply
        assert str(tmp_path) not in one_line_error(reply)  # the server's own paths stay private


def test_an_unexpected_failure_is_a_500_with_one_line(served, monkeypatch):
    srv, _, _ = served

    def broken(self, keys):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(DirectoryBackend, "has", broken)
    status, reply = request(srv, "POST", "/llama/.has", json.dumps(["HEAD"]).encode())
    assert status == 500 and "Input/output error" in one_line_error(reply)
    assert request(srv, "GET", "/llama/.refs")[0] == 200  # the server still serves


# -- item 31: idle and slow clients, bounded connections ----------------------------------------


def test_idle_and_stalled_connections_are_closed_after_the_timeout(tmp_path):
    srv = start(tmp_path, idle_timeout=0.5)
    try:
        idle = socket.create_connection(srv.server_address[:2], timeout=10)
        stalled = socket.create_connection(srv.server_address[:2], timeout=10)
        stalled.sendall(b"PUT /r/objects/" + b"a" * 40 + b" HTTP/1.1\r\nContent-Length: 1000\r\n\r\n0123456789")
        began = time.monotonic()
        assert idle.recv(100) == b""  # closed by the server, no request to answer
        reply = b""
        while chunk := stalled.recv(4096):
            reply += chunk
        assert time.monotonic() - began < 5
        assert reply.startswith(b"HTTP/1.1 408") and b"no data for 0.5 s" in reply
        idle.close()
        stalled.close()
    finally:
        stop(srv)


def _trickle(sock: socket.socket, head: bytes, pieces: int) -> bytes:
    """Send ``head``, then one byte per 0.2 s (each well within the idle timeout) until the
    server stops reading; what it answered."""
    sock.sendall(head)
    began = time.monotonic()
    try:
        for _ in range(pieces):
            time.sleep(0.2)
            sock.sendall(b"x")
    except OSError:
        pass
    sock.settimeout(5)
    reply = b""
    try:
        while chunk := sock.recv(4096):
            reply += chunk
    except OSError:
        pass
    assert time.monotonic() - began < pieces * 0.2, "the slow client was never cut off"
    return reply


def test_slow_clients_are_cut_off_however_often_they_send(tmp_path):
    srv = start(tmp_path, idle_timeout=0.5)
    srv.min_rate = 10 * 2**20
    try:
        headers = socket.create_connection(srv.server_address[:2], timeout=10)
        _trickle(headers, b"GET /r/.refs HTTP/1.1\r\nX-Slow: ", 40)  # headers never end
        body = socket.create_connection(srv.server_address[:2], timeout=10)
        reply = _trickle(body, b"PUT /r/objects/" + b"a" * 40 + b" HTTP/1.1\r\nContent-Length: 1000\r\n\r\n", 40)
        assert reply.startswith(b"HTTP/1.1 408") and b"arrived too slowly" in reply
        assert request(srv, "GET", "/r/.refs")[0] == 404  # still serving
    finally:
        stop(srv)


def _hold(srv: MgitServer, n: int) -> list[socket.socket]:
    """``n`` idle connections, each holding one of the server's slots once accepted."""
    held = [socket.create_connection(srv.server_address[:2], timeout=10) for _ in range(n)]
    deadline = time.monotonic() + 5
    while srv._slots._value and time.monotonic() < deadline:
        time.sleep(0.01)
    return held


def test_connections_beyond_the_bound_get_503_and_clients_retry(tmp_path):
    srv = start(tmp_path, max_connections=3)
    held = _hold(srv, 3)
    try:
        threads = threading.active_count()
        status, reply = request(srv, "GET", "/llama/.refs")
        assert status == 503 and one_line_error(reply) == BUSY
        assert threading.active_count() == threads  # no thread for the refused connection
        threading.Timer(0.3, lambda: [s.close() for s in held]).start()
        assert HttpBackend(f"{srv.url}/llama").refs() == {}  # retried until a slot was free (404: no repository)
    finally:
        for s in held:
            s.close()
        stop(srv)


def test_a_server_that_stays_busy_is_one_clear_error(tmp_path, monkeypatch):
    """Asked 1 + BUSY_RETRIES times, whatever the method (urllib3 retries no POST by default;
    a 503 is answered before the request is read), then one line with the server's reason."""
    monkeypatch.setattr(http_backend, "BUSY_RETRIES", 2)
    monkeypatch.setattr(http_backend, "BUSY_BACKOFF_S", 0.01)
    srv = start(tmp_path, max_connections=1)
    held = _hold(srv, 1)
    asked = connections_accepted(srv, monkeypatch)
    try:
        backend = HttpBackend(f"{srv.url}/llama")
        with pytest.raises(RemoteError, match="is busy: the server is busy"):
            backend.refs()
        assert len(asked) == 3
        with pytest.raises(RemoteError, match="is busy: the server is busy"):
            backend.has(["HEAD"])  # a POST
        assert len(asked) == 6
    finally:
        held[0].close()
        stop(srv)


# -- item 29: a ref names a commit the remote holds with its graph -------------------------------


def _swap(srv: MgitServer, new: object, ref: str = "refs/heads/other") -> tuple[int, dict]:
    return request(srv, "POST", "/llama/.swap", json.dumps({"ref": ref, "old": None, "new": new}).encode())


def test_swap_refuses_values_that_are_not_commits_it_holds(served, tmp_path):
    srv, repo, head = served
    tree = repo.graph.commit(head).tree
    for value, reason in [
        ("not hex at all", "not a 40-hex commit id"),
        ('{"json": true}', "not a 40-hex commit id"),
        ("A" * 40, "not a 40-hex commit id"),
        ("a" * 40, "lacks that commit"),
        (tree, "names a tree, not a commit"),
    ]:
        status, reply = _swap(srv, value)
        assert status == 400 and reason in one_line_error(reply), (value, reply)
    assert set(HttpBackend(f"{srv.url}/llama").refs()) == {"refs/heads/main"}
    assert Repository.clone(f"{srv.url}/llama", tmp_path / "clone").refs.head() == head


def test_swap_refuses_a_commit_whose_graph_is_incomplete(served):
    srv, repo, head = served
    child = commit_model(repo, frozen_finetune(llama_state_dict(), {0}, seed=4), "child")
    served_repo = Path(srv.root) / "llama"
    from mgit.remote.backend import object_key, pack_object

    # the new commit arrives, but not the tree it names
    (served_repo / object_key(child)).write_bytes(pack_object(repo.graph.objects[child.encode()]))
    status, reply = _swap(srv, child)
    assert status == 400 and "which it reaches" in one_line_error(reply)
    repo.push()  # sends the rest: now it is accepted
    assert _swap(srv, child)[0] == 200


@pytest.mark.parametrize("kind", ["http", "directory"])
def test_a_garbage_ref_on_the_remote_is_named_by_the_client(served, tmp_path, kind):
    srv, _, _ = served
    (Path(srv.root) / "llama" / "refs" / "heads" / "broken").write_text('{"not": "a commit"}\n')
    url = f"{srv.url}/llama" if kind == "http" else str(Path(srv.root) / "llama")
    proc = invoke("clone", url, str(tmp_path / "clone"), cwd=tmp_path)
    assert proc.returncode != 0
    assert "malformed ref 'refs/heads/broken'" in proc.stderr and "mgit serve` running" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and not (tmp_path / "clone").exists()


# -- item 28: decompression bombs -------------------------------------------------------------


def _bomb_frame(content_size: bool) -> bytes:
    """A zstd frame of BOMB_RAW zero bytes (a few KiB), made without holding them in memory."""
    cctx = zstandard.ZstdCompressor(level=1, write_content_size=content_size)
    out = cctx.compressobj(size=BOMB_RAW if content_size else -1)
    zeros = bytes(2**20)
    return b"".join([out.compress(zeros) for _ in range(BOMB_RAW // 2**20)] + [out.flush()])


def _bombs() -> list[tuple[str, Record]]:
    cid = chunk_id(bytes(BOMB_RAW))
    return [
        ("declares 67108864 raw bytes", Record(cid, codec.GROUPED_ZSTD, 1, 0, BOMB_RAW, _bomb_frame(True), None)),
        ("announces 67108864 bytes", Record(cid, codec.GROUPED_ZSTD, 1, 0, 4 * 2**20, _bomb_frame(True), None)),
        ("holds more than the 4194304", Record(cid, codec.GROUPED_ZSTD, 1, 0, 4 * 2**20, _bomb_frame(False), None)),
    ]


@pytest.fixture(scope="module")
def bombs():
    return _bombs()


def _peak_mib(fn, *args):
    """(what ``fn(*args)`` returned or raised, the peak MiB Python allocated meanwhile)."""
    tracemalloc.start()
    try:
        try:
            result = fn(*args)
        except Exception as exc:
            result = exc
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    return result, peak / 2**20


def test_the_server_refuses_chunk_bombs_without_inflating_them(served, bombs):
    srv, _, _ = served
    for reason, record in bombs:
        data = pack_chunk(record)
        assert len(data) < 64 * 1024
        (status, reply), peak = _peak_mib(request, srv, "PUT", f"/llama/chunks/{record.cid}", data)
        assert status == 400 and reason in one_line_error(reply)
        assert peak < 24, f"{peak:.0f} MiB to refuse a {len(data)}-byte upload"
    assert request(srv, "POST", "/llama/.has", json.dumps([f"chunks/{bombs[0][1].cid}"]).encode()) == (200, [])


def test_receive_and_fetch_refuse_chunk_bombs(tmp_path, bombs):
    store = ChunkStore(tmp_path / "chunks")
    for reason, record in bombs:
        error, peak = _peak_mib(store.receive, record)
        assert isinstance(error, CorruptObjectError) and reason in str(error) and peak < 24
    remote = tmp_path / "remote"
    DirectoryBackend(remote, create=True)
    backend = DirectoryBackend(remote)
    for reason, record in bombs:
        backend.put(f"chunks/{record.cid}", pack_chunk(record))
        with pytest.raises(CorruptObjectError, match=reason.split(" ")[0]):
            fetch_chunks(store, backend, [record.cid], Transfer(), Bar())
        (remote / "chunks" / record.cid).unlink()
    store.seal()
    assert not store.has(bombs[0][1].cid)


def test_a_record_header_declaring_a_huge_size_is_refused_before_decoding(served):
    srv, _, _ = served
    cid = "ab" * 32
    header = struct.pack("<4sBBBxQ32s", b"MGCR", 1, codec.RAW, 1, 2**40, bytes(32))
    status, reply = request(srv, "PUT", f"/llama/chunks/{cid}", header + b"x" * 10)
    assert status == 400 and "more than the 4194304" in one_line_error(reply)


# -- item 4: a working repository as a remote ----------------------------------------------


@pytest.fixture
def upstream(tmp_path):
    repo = Repository.init(tmp_path / "upstream")
    base = llama_state_dict()
    commit_model(repo, base, "base")
    return repo, base


def test_a_working_repository_can_be_cloned_fetched_and_pulled(upstream, tmp_path):
    repo, base = upstream
    proc = invoke("clone", str(repo.root), str(tmp_path / "clone"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert tree_hashes(tmp_path / "clone") == tree_hashes(repo.root)
    clone = Repository(tmp_path / "clone")
    assert clone.fsck() == [] and clone.refs.current_branch() == "main"
    newer = commit_model(repo, frozen_finetune(base, {0, 1}, seed=5), "fine-tune")
    invoke("pull", cwd=clone.root, check=True)
    assert Repository(clone.root).refs.head() == newer and tree_hashes(clone.root) == tree_hashes(repo.root)
    partial = Repository.clone(str(repo.root), tmp_path / "partial", partial=True)
    assert tree_hashes(partial.root) == tree_hashes(repo.root)


def test_pushing_into_a_working_repository_refuses_only_its_checked_out_branch(upstream, tmp_path):
    repo, base = upstream
    before = repo.refs.head()
    clone = Repository.clone(str(repo.root), tmp_path / "clone")
    commit_model(clone, frozen_finetune(base, {2}, seed=6), "theirs")
    proc = invoke("push", cwd=clone.root)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert "pushing into its checked-out branch main is refused" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    assert Repository(repo.root).refs.head() == before and repo.status().clean
    clone.refs.create_branch("topic", clone.refs.head())
    pushed = clone.push("origin", "topic")
    assert pushed.chunks > 0
    upstream_again = Repository(repo.root)
    assert upstream_again.refs.branches()["topic"] == clone.refs.head() and upstream_again.fsck() == []
    assert upstream_again.state_dict("topic").keys() == base.keys()
    assert clone.push("origin", "topic").chunks == 0  # up to date


def test_pushing_into_an_older_working_repository_marks_it_with_this_format(upstream, tmp_path):
    """What is pushed may be of kinds an older format lacks (a patch delta, mgit.file/2): the
    working repository is marked with this mgit's format before the first chunk lands, as its
    own commands mark it; a format this mgit cannot read is refused before anything travels."""
    repo, base = upstream
    clone = Repository.clone(str(repo.root), tmp_path / "clone")
    commit_model(clone, frozen_finetune(base, {2}, seed=6), "theirs")
    clone.refs.create_branch("topic", clone.refs.head())
    mark_format(repo.graph, 3)
    clone.push("origin", "topic")
    assert read_format(Repository(repo.root).graph, repo.root) == FORMAT_VERSION
    mark_format(repo.graph, FORMAT_VERSION + 1)
    proc = invoke("push", "origin", "topic", cwd=clone.root)
    assert proc.returncode == 10 and f"uses mgit format {FORMAT_VERSION + 1}" in proc.stderr


# -- item 9: S3 errors are one line naming what to fix ------------------------------------------


@pytest.fixture
def s3(s3_endpoint, monkeypatch, tmp_path):
    """A bucket on moto's server, the AWS variables pointing at it and no ~/.aws: (url, env)."""
    import boto3

    env = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.delenv("AWS_SESSION_TOKEN", raising=False)
    bucket = f"mgit-{tmp_path.name[-12:].lower().replace('_', '-')}-x"
    boto3.session.Session().client("s3").create_bucket(Bucket=bucket)
    return f"s3://{bucket}/models", env


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"AWS_SECRET_ACCESS_KEY": ""}, "incomplete AWS credentials: AWS_SECRET_ACCESS_KEY is missing or empty"),
        ({"AWS_SECRET_ACCESS_KEY": None}, "AWS_SECRET_ACCESS_KEY is missing or empty"),
        ({"AWS_ACCESS_KEY_ID": None, "AWS_SECRET_ACCESS_KEY": None}, "no AWS credentials (set AWS_ACCESS_KEY_ID"),
        ({"AWS_PROFILE": "nope"}, "AWS_PROFILE names the profile 'nope'"),
        ({"AWS_ENDPOINT_URL": "not a url"}, "AWS_ENDPOINT_URL 'not a url' is not a valid URL"),
        ({"AWS_ENDPOINT_URL": "http://127.0.0.1:9"}, "cannot reach the S3 endpoint http://127.0.0.1:9"),
    ],
)
def test_s3_configuration_errors_name_the_variable(s3, monkeypatch, change, message):
    url, _ = s3
    for k, v in change.items():
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, v)
    with pytest.raises(MgitError) as info:
        S3Backend(url).refs()
    assert message in str(info.value) and "\n" not in str(info.value)


def test_s3_credential_and_permission_errors_name_the_variable(s3, monkeypatch):
    import boto3
    import moto.settings

    url, _ = s3
    iam = boto3.session.Session().client("iam")
    iam.create_user(UserName="reader")
    key = iam.create_access_key(UserName="reader")["AccessKey"]
    monkeypatch.setattr(moto.settings, "INITIAL_NO_AUTH_ACTION_COUNT", 0)  # moto checks every request now
    for key_id, secret, error, message in [
        ("AKIAUNKNOWNKEY000000", "x" * 40, AuthError, "does not know the access key: check AWS_ACCESS_KEY_ID"),
        (key["AccessKeyId"], "wrong" * 8, AuthError, "does not match the access key: check AWS_SECRET_ACCESS_KEY"),
        (key["AccessKeyId"], key["SecretAccessKey"], AuthError, "access denied (AccessDenied"),
    ]:
        monkeypatch.setenv("AWS_ACCESS_KEY_ID", key_id)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
        with pytest.raises(error, match=re.escape(message)) as info:
            S3Backend(url).refs()
        assert "\n" not in str(info.value)


def test_s3_missing_bucket_and_bad_names(s3):
    url, _ = s3
    with pytest.raises(RemoteError, match="bucket 'no-such-bucket-mgit' does not exist; create it first"):
        S3Backend("s3://no-such-bucket-mgit/x").refs()
    with pytest.raises(BadInputError, match="not a valid S3 bucket name"):
        S3Backend("s3://Bad_Bucket!/x").refs()


def test_the_cli_says_which_variable_is_empty(s3, tmp_path):
    url, env = s3
    proc = run_mgit("clone", url, str(tmp_path / "clone"), cwd=tmp_path, env={**env, "AWS_SECRET_ACCESS_KEY": ""})
    assert proc.returncode != 0 and "internal error" not in proc.stderr and "Traceback" not in proc.stderr
    assert "AWS_SECRET_ACCESS_KEY is missing or empty" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_the_serve_command_takes_a_timeout_and_a_connection_bound(tmp_path):
    import os
    import subprocess
    import sys

    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mgit",
            "serve",
            str(tmp_path),
            "--port",
            "0",
            "--timeout",
            "0.5",
            "--max-connections",
            "1",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ.copy(),
    )
    try:
        line = proc.stderr.readline()
        url = re.search(r"at (http://\S+)", line).group(1)
        host, port = url.removeprefix("http://").split(":")
        idle = socket.create_connection((host, int(port)), timeout=10)
        time.sleep(0.2)  # accepted: the one slot is taken
        other = socket.create_connection((host, int(port)), timeout=10)
        other.sendall(b"GET /r/.refs HTTP/1.1\r\nHost: x\r\n\r\n")
        assert other.recv(4096).startswith(b"HTTP/1.1 503")
        began = time.monotonic()
        assert idle.recv(100) == b"" and time.monotonic() - began < 5  # closed after 0.5 s idle
        idle.close()
        other.close()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


def test_a_failed_push_into_a_working_repository_releases_its_lock(upstream, tmp_path, monkeypatch):
    from mgit.errors import RemoteError
    from mgit.remote.working import WorkingRepositoryBackend

    repo, base = upstream
    clone = Repository.clone(str(repo.root), tmp_path / "clone")
    commit_model(clone, frozen_finetune(base, {1}, seed=7), "theirs")
    clone.refs.create_branch("topic", clone.refs.head())

    def refuse(self, *args, **kwargs):
        raise RemoteError("the ref did not move")

    monkeypatch.setattr(WorkingRepositoryBackend, "swap_ref", refuse)
    with pytest.raises(RemoteError):
        clone.push("origin", "topic")
    with Repository(repo.root).lock:  # free again: the push let go of the other repository's lock
        pass
