"""A hostile or broken server: every odd reply is one clear error, and nothing is left behind."""

from __future__ import annotations

import json
import threading
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from mgit import Repository
from mgit.errors import CorruptObjectError, RemoteError
from mgit.remote import http as http_backend

BLOB = "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"  # the empty blob


def serve(replies: dict[str, tuple[int, bytes]]):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            status, body = replies.get(self.path.rsplit("/", 1)[-1], (404, b'{"error": "no"}'))
            self.send_response(status)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        do_POST = do_GET

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize(
    ("replies", "message"),
    [
        ({".refs": (200, b"<html>not json</html>")}, "malformed reply"),
        ({".refs": (200, json.dumps({"refs/heads/main": "not a sha"}).encode())}, "malformed ref"),
        ({".refs": (200, json.dumps({"../../etc": "a" * 40}).encode())}, "unexpected ref name"),
        ({".refs": (200, json.dumps(["refs/heads/main"]).encode())}, "malformed reply"),
        (
            {".refs": (200, json.dumps({"refs/heads/main": "a" * 40}).encode()), "a" * 40: (200, b"garbage")},
            "not a valid git object",
        ),
        (
            {
                ".refs": (200, json.dumps({"refs/heads/main": BLOB}).encode()),
                BLOB: (200, zlib.compress(b"blob 0\x00")),
            },
            "names a blob",
        ),
    ],
)
def test_odd_replies_are_one_clear_error_and_leave_nothing(tmp_path, replies, message):
    server = serve(replies)
    try:
        with pytest.raises((RemoteError, CorruptObjectError), match=message):
            Repository.clone(f"http://127.0.0.1:{server.server_address[1]}/repo", tmp_path / "clone")
        assert not (tmp_path / "clone").exists()
    finally:
        server.shutdown()
        server.server_close()


def test_an_endless_reply_is_cut_off(tmp_path, monkeypatch):
    monkeypatch.setattr(http_backend, "MAX_REPLY_BYTES", 1000)
    server = serve({".refs": (200, b"[" + b" " * 5000 + b"]")})
    try:
        with pytest.raises(RemoteError, match="more than 1000 bytes"):
            Repository.clone(f"http://127.0.0.1:{server.server_address[1]}/repo", tmp_path / "clone")
    finally:
        server.shutdown()
        server.server_close()
