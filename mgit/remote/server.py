"""`mgit serve`: every remote directory under a root, over HTTP.

    GET  /<repo>/<key>       an object (objects/…, chunks/…, HEAD)
    PUT  /<repo>/<key>       store an object: checked against its id first (a chunk is decoded,
                             its delta base read from this remote), then made visible atomically
    POST /<repo>/.has        JSON list of keys → the JSON list of those present
    POST /<repo>/.sizes      JSON list of keys → JSON {key: stored size in bytes} of those present
    GET  /<repo>/.refs       JSON {ref: commit id}
    POST /<repo>/.swap       JSON {"ref", "old", "new"}: compare-and-swap; 409 if it moved

Access: with a token file (lines ``ro TOKEN`` / ``rw TOKEN``) every request needs
``Authorization: Bearer TOKEN``; writes need an ``rw`` token. Nothing outside the root is
ever read or written (repository paths and keys are checked), bodies above
MAX_OBJECT_BYTES are refused, and a client that dies mid-upload leaves nothing visible.
"""

from __future__ import annotations

import json
import threading
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mgit.errors import BadInputError, CorruptObjectError, MgitError, RemoteError
from mgit.remote.backend import MAX_OBJECT_BYTES, MissingObjectError, check_key, unpack_chunk, unpack_object
from mgit.remote.local import MARKER, DirectoryBackend
from mgit.store import codec
from mgit.store.chunkstore import MAX_DELTA_DEPTH, chunk_id

SPECIAL = (".has", ".sizes", ".refs", ".swap")
NO_REPOSITORY = "no such repository"


def read_tokens(path: str | Path) -> dict[str, str]:
    """token → "ro" | "rw" from lines ``ro TOKEN`` / ``rw TOKEN`` (# comments allowed)."""
    tokens = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError as exc:
        raise BadInputError(f"cannot read token file {path}: {exc.strerror}") from None
    for n, line in enumerate(lines, 1):
        line = line.split("#", 1)[0].strip()
        if not line:
            continue
        parts = line.split()
        if len(parts) != 2 or parts[0] not in ("ro", "rw"):
            raise BadInputError(f"{path}:{n}: expected `ro TOKEN` or `rw TOKEN`")
        tokens[parts[1]] = parts[0]
    return tokens


def verify_upload(backend: DirectoryBackend | None, key: str, data: bytes) -> None:
    """Refuse an object that does not match its id (CorruptObjectError); ``backend`` holds the
    delta bases (None: a repository not created yet, which holds none)."""
    name = key.split("/", 1)[1] if "/" in key else key
    if key.startswith("objects/"):
        unpack_object(name, data)
    elif key.startswith("chunks/"):
        _decoded(backend, name, data, 0)


def _decoded(backend: DirectoryBackend | None, cid: str, data: bytes, depth: int) -> bytes | memoryview:
    record = unpack_chunk(cid, data)
    base = None
    if record.encoding == codec.XOR_DELTA:
        if depth >= MAX_DELTA_DEPTH or not record.base:
            raise CorruptObjectError(f"chunk {cid[:12]} has a delta chain longer than {MAX_DELTA_DEPTH}")
        try:
            if backend is None:
                raise MissingObjectError(record.base)
            base = _decoded(backend, record.base, backend.get(f"chunks/{record.base}"), depth + 1)
        except MissingObjectError:
            raise CorruptObjectError(f"chunk {cid[:12]} arrived before the chunk it is a delta of") from None
    try:
        raw = codec.decode(record.encoding, record.payload, record.group, record.raw_size, base)
    except Exception:
        raw = None
    if raw is None or len(raw) != record.raw_size or chunk_id(raw) != cid:
        raise CorruptObjectError(f"chunk {cid[:12]} does not match its id")
    return raw


class _Handler(BaseHTTPRequestHandler):
    server: MgitServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: object) -> None:  # quiet by default
        if self.server.verbose:
            super().log_message(format, *args)

    # -- plumbing ---------------------------------------------------------------------------

    def _reply(self, status: int, body: bytes = b"", kind: str = "application/octet-stream") -> None:
        self.send_response(status)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if body:
            self.wfile.write(body)

    def _json(self, status: int, value: object) -> None:
        self._reply(status, json.dumps(value).encode(), "application/json")

    def _error(self, status: int, message: str) -> None:
        self._json(status, {"error": message})

    def _body(self) -> bytes | None:
        """The request body, or None after replying with an error (too large, cut short)."""
        try:
            size = int(self.headers.get("Content-Length", ""))
        except ValueError:
            self._error(HTTPStatus.LENGTH_REQUIRED, "Content-Length required")
            return None
        if size < 0 or size > self.server.max_body:
            self._error(HTTPStatus.REQUEST_ENTITY_TOO_LARGE, f"bodies are limited to {self.server.max_body} bytes")
            self.close_connection = True
            return None
        data = self.rfile.read(size)
        if len(data) != size:  # the client went away mid-upload: nothing is stored
            self.close_connection = True
            return None
        return data

    def _allowed(self, write: bool) -> bool:
        tokens = self.server.tokens
        if tokens is None:
            return True
        auth = self.headers.get("Authorization", "")
        role = tokens.get(auth.removeprefix("Bearer ").strip()) if auth.startswith("Bearer ") else None
        if role is None:
            self._error(HTTPStatus.UNAUTHORIZED, "a valid bearer token is required")
            return False
        if write and role != "rw":
            self._error(HTTPStatus.FORBIDDEN, "this token may only read")
            return False
        return True

    def _route(self, create: bool) -> tuple[DirectoryBackend | Path, str] | None:
        """(repository, key or special endpoint) from the path, or None after an error reply.
        The repository is its path when it does not exist yet and ``create`` allows it (made
        by the caller once the request is known to be good)."""
        path = self.path.split("?", 1)[0]
        parts = [p for p in path.split("/") if p]
        for i, part in enumerate(parts):
            if part in ("objects", "chunks", "refs") or part == "HEAD" or part in SPECIAL:
                repo_parts, key = parts[:i], "/".join(parts[i:])
                break
        else:
            self._error(HTTPStatus.NOT_FOUND, "no such object")
            return None
        if not repo_parts or any(p in (".", "..") or p.startswith(".") for p in repo_parts):
            self._error(HTTPStatus.BAD_REQUEST, "not a repository path")
            return None
        where = (self.server.root / Path(*repo_parts)).resolve()
        if not where.is_relative_to(self.server.root):
            self._error(HTTPStatus.BAD_REQUEST, "not a repository path")
            return None
        try:
            if key not in SPECIAL:
                check_key(key)
            if not (where / MARKER).is_file():
                if not create:
                    self._error(HTTPStatus.NOT_FOUND, NO_REPOSITORY)
                    return None
                return where, key
            return DirectoryBackend(where), key
        except MgitError as exc:
            self._error(HTTPStatus.BAD_REQUEST, str(exc))
            return None

    # -- methods ----------------------------------------------------------------------------

    def do_GET(self) -> None:
        if not self._allowed(write=False) or (routed := self._route(create=False)) is None:
            return
        backend, key = routed
        assert isinstance(backend, DirectoryBackend)  # create=False: an existing repository
        if key == ".refs":
            return self._json(HTTPStatus.OK, backend.refs())
        try:
            self._reply(HTTPStatus.OK, backend.get(key))
        except MissingObjectError:
            self._error(HTTPStatus.NOT_FOUND, f"no {key}")

    def do_PUT(self) -> None:
        if not self._allowed(write=True):
            return
        data = self._body()
        if data is None or (routed := self._route(create=True)) is None:
            return
        target, key = routed
        if key in SPECIAL or not key.startswith(("objects/", "chunks/")):
            return self._error(HTTPStatus.BAD_REQUEST, "only objects and chunks are uploaded")
        try:
            verify_upload(target if isinstance(target, DirectoryBackend) else None, key, data)
        except CorruptObjectError as exc:
            return self._error(HTTPStatus.BAD_REQUEST, str(exc))
        self._backend(target).put(key, data)
        self._reply(HTTPStatus.CREATED)

    def _backend(self, target: DirectoryBackend | Path) -> DirectoryBackend:
        """The repository, created now if it did not exist (a first push)."""
        if isinstance(target, DirectoryBackend):
            return target
        with self.server.create_lock:
            return DirectoryBackend(target, create=True)

    def do_POST(self) -> None:
        # The endpoint as _route will find it (query string dropped): a read-only token must
        # never reach .swap, however the path is dressed up.
        writes = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] == ".swap"
        if not self._allowed(write=writes):
            return
        data = self._body()
        if data is None or (routed := self._route(create=writes)) is None:
            return
        target, key = routed
        if key == ".swap" and not writes:  # pragma: no cover - both parse the same path
            return self._error(HTTPStatus.FORBIDDEN, "this token may only read")
        try:
            value = json.loads(data)
            if key == ".has":
                keys = [check_key(k) for k in value]
                return self._json(HTTPStatus.OK, sorted(self._backend(target).has(keys)))
            if key == ".sizes":
                keys = [check_key(k) for k in value]
                return self._json(HTTPStatus.OK, self._backend(target).sizes(keys))
            if key == ".swap":
                ref = check_key(value["ref"])
                if not ref.startswith("refs/"):
                    raise RemoteError("only refs can be swapped")
                ok = self._backend(target).swap_ref(ref, value.get("old"), value.get("new"))
                return self._json(HTTPStatus.OK if ok else HTTPStatus.CONFLICT, {"ok": ok})
        except (ValueError, TypeError, KeyError, MgitError) as exc:
            return self._error(HTTPStatus.BAD_REQUEST, f"bad request: {exc}")
        self._error(HTTPStatus.NOT_FOUND, "no such endpoint")


class MgitServer(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(
        self,
        root: str | Path,
        host: str = "127.0.0.1",
        port: int = 8790,
        tokens: dict[str, str] | None = None,
        max_body: int = MAX_OBJECT_BYTES + 4096,
        verbose: bool = False,
    ):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise BadInputError(f"{root} is not a directory")
        self.tokens, self.max_body, self.verbose = tokens, max_body, verbose
        self.create_lock = threading.Lock()
        super().__init__((host, port), _Handler)

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        return f"http://{host}:{port}"
