"""`mgit serve`: every remote directory under a root, over HTTP.

Objects are checked against their ids before they are made visible; refs move by
compare-and-swap; every error is a status with a one-line JSON reason; tokens, timeouts and
connection limits protect it. The endpoints: docs/remotes.md, "`mgit serve`" and docs/design.md,
"Notes from the code".
"""

from __future__ import annotations

import functools
import json
import socket
import sys
import threading
import time
from collections.abc import Callable
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from mgit.errors import BadInputError, CorruptObjectError, MgitError, RemoteError
from mgit.remote.backend import (
    MAX_OBJECT_BYTES,
    BadRefError,
    MissingObjectError,
    check_key,
    unpack_chunk,
    unpack_object,
)
from mgit.remote.local import MARKER, DirectoryBackend
from mgit.store import codec, record
from mgit.store.chunkstore import MAX_DELTA_DEPTH

SPECIAL = (".has", ".sizes", ".refs", ".swap")
NO_REPOSITORY = "no such repository"
IDLE_TIMEOUT_S = 30.0  # a connection silent this long (between requests or mid-request) is closed
MAX_CONNECTIONS = 64  # served at once; more get 503
MIN_BODY_RATE = 64 * 1024  # bytes/s a request body must average (after one idle timeout of grace)
BUSY = "the server is busy (too many connections); try again shortly"


class BadRequest(MgitError):
    """A request body or parameter the server refuses (400)."""


def parse_json(data: bytes) -> object:
    """A request body as JSON; BadRequest (one line) for anything that is not (deeply nested
    JSON overflows the parser's recursion: refused like any other malformed body)."""
    try:
        return json.loads(data)
    except RecursionError:
        raise BadRequest("the JSON body is nested too deeply") from None
    except ValueError as exc:  # JSONDecodeError, and bodies that are not UTF-8
        raise BadRequest(f"the body is not JSON ({str(exc).splitlines()[0][:80]})") from None


def key_list(value: object) -> list[str]:
    """The keys of a .has / .sizes body: a JSON list of key strings, each a valid key (one
    that is not is bad input, 400, not a server failure)."""
    if not isinstance(value, list) or not all(isinstance(k, str) for k in value):
        raise BadRequest("expected a JSON list of key strings")
    try:
        return [check_key(k) for k in value]
    except RemoteError as exc:
        raise BadRequest(str(exc)) from None


def swap_request(value: object) -> tuple[str, str | None, str | None]:
    """(ref, old, new) of a .swap body: {"ref": str, "old": str|null, "new": str|null}."""
    if not isinstance(value, dict) or not isinstance(value.get("ref"), str):
        raise BadRequest('expected a JSON object {"ref": NAME, "old": ID or null, "new": ID or null}')
    old, new = value.get("old"), value.get("new")
    if not all(v is None or isinstance(v, str) for v in (old, new)):
        raise BadRequest('"old" and "new" must be commit ids (strings) or null')
    try:
        ref = check_key(value["ref"])
    except RemoteError as exc:
        raise BadRequest(str(exc)) from None
    if not ref.startswith("refs/"):
        raise BadRequest("only refs can be swapped")
    return ref, old, new


def answered(method: Callable[[_Handler], None]) -> Callable[[_Handler], None]:
    """Every request gets a status and a one-line reason, whatever goes wrong: a refused input
    is 400, a stalled client 408, anything else 500 (logged), never a dropped connection."""

    @functools.wraps(method)
    def wrapper(self: _Handler) -> None:
        try:
            method(self)
        except TimeoutError:
            self.close_connection = True
            self._fail(HTTPStatus.REQUEST_TIMEOUT, f"no data for {self.server.idle_timeout:g} s; closing")
        except (BadRequest, BadRefError, CorruptObjectError, BadInputError) as exc:
            self._fail(HTTPStatus.BAD_REQUEST, str(exc))
        except ConnectionError:
            self.close_connection = True  # the client went away: nobody to answer
        except MgitError as exc:
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, str(exc))
        except Exception as exc:  # a bug, or the disk: still one line for the client
            self.log_failure(f"{self.command} {self.path[:200]} failed: {exc!r}")
            self._fail(HTTPStatus.INTERNAL_SERVER_ERROR, f"internal error {type(exc).__name__}: {str(exc)[:200]}")

    return wrapper


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


def _decoded(backend: DirectoryBackend | None, cid: str, data: bytes, depth: int) -> record.RawBytes:
    rec = unpack_chunk(cid, data)
    base = None
    if rec.is_delta:
        if depth >= MAX_DELTA_DEPTH or not rec.base:
            raise CorruptObjectError(f"chunk {cid[:12]} has a delta chain longer than {MAX_DELTA_DEPTH}")
        try:
            if backend is None:
                raise MissingObjectError(rec.base)
            base = _decoded(backend, rec.base, backend.get(f"chunks/{rec.base}"), depth + 1)
        except MissingObjectError:
            raise CorruptObjectError(f"chunk {cid[:12]} arrived before the chunk it is a delta of") from None
    try:
        return record.decode_verified(rec, base)
    except codec.ChunkTooLargeError as exc:  # a decompression bomb: refused before it inflates
        raise CorruptObjectError(f"chunk {cid[:12]}: {exc}; refusing it") from None
    except record.MismatchError:
        raise CorruptObjectError(f"chunk {cid[:12]} does not match its id") from None


class _Handler(BaseHTTPRequestHandler):
    server: MgitServer
    protocol_version = "HTTP/1.1"

    def setup(self) -> None:
        # applied to the socket by StreamRequestHandler, which reads it per instance (typeshed declares a ClassVar)
        self.timeout = self.server.idle_timeout  # type: ignore[misc]
        self._replied = self._cut = False
        super().setup()

    def handle_one_request(self) -> None:
        """One request, its headers due within two idle timeouts (a client trickling them a
        byte at a time is cut off by the server's reaper)."""
        self._replied = self._cut = False
        self.server.watch(self, 2 * self.server.idle_timeout)
        try:
            super().handle_one_request()
        finally:
            self.server.unwatch(self)

    def parse_request(self) -> bool:
        ok = super().parse_request()  # the headers are in: what follows is bounded apart
        self.server.unwatch(self)
        return ok

    def cut_off(self) -> None:
        """Stop reading from a client past its deadline: its blocked read returns at once."""
        self._cut = True
        try:
            self.connection.shutdown(socket.SHUT_RD)
        except OSError:
            pass

    def log_message(self, format: str, *args: object) -> None:  # quiet by default
        if self.server.verbose:
            super().log_message(format, *args)

    def log_failure(self, message: str) -> None:
        """A request that failed on the server's side (a 500): always logged, one line on stderr."""
        sys.stderr.write(f"mgit serve: {self.address_string()}: {message}\n")

    # -- plumbing ---------------------------------------------------------------------------

    def _reply(self, status: int, body: bytes = b"", kind: str = "application/octet-stream") -> None:
        self._replied = True
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

    def _fail(self, status: int, message: str) -> None:
        """An error reply after a failure, unless a reply was already on its way (then the
        connection is closed: the client sees a cut reply, never a wrong one)."""
        if self._replied:
            self.close_connection = True
            return
        try:
            one_line = " ".join(message.replace(str(self.server.root), "ROOT").split())  # server paths stay private
            self._error(status, one_line)
        except OSError:
            self.close_connection = True

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
        self.server.watch(self, self.server.idle_timeout + size / self.server.min_rate)
        data = self._read(size)
        self.server.unwatch(self)
        if self._cut:
            self.close_connection = True
            self._error(HTTPStatus.REQUEST_TIMEOUT, "the request body arrived too slowly; closing")
            return None
        if len(data) != size:  # the client went away mid-upload: nothing is stored
            self.close_connection = True
            return None
        return data

    def _read(self, size: int) -> bytes:
        """``size`` body bytes (fewer if the client went away), read in pieces so that each
        wait is bounded by the socket's idle timeout."""
        pieces, got = [], 0
        while got < size:
            piece = self.rfile.read(min(size - got, 2**20))
            if not piece:
                break
            pieces.append(piece)
            got += len(piece)
        return b"".join(pieces)

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

    @answered
    def do_GET(self) -> None:
        if not self._allowed(write=False) or (routed := self._route(create=False)) is None:
            return
        backend, key = routed
        assert isinstance(backend, DirectoryBackend)  # create=False: an existing repository
        if key == ".refs":  # as stored: a damaged ref is named by the client's check
            return self._json(HTTPStatus.OK, backend.raw_refs())
        try:
            self._reply(HTTPStatus.OK, backend.get(key))
        except MissingObjectError:
            self._error(HTTPStatus.NOT_FOUND, f"no {key}")

    @answered
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
            try:
                return DirectoryBackend(target, create=True)
            except RemoteError as exc:  # not empty, or a working repository
                raise BadRequest(str(exc).replace(str(self.server.root), "ROOT")) from None
            except OSError as exc:  # a file where a directory would be
                raise BadRequest(f"cannot create a repository at that path: {exc.strerror}") from None

    @answered
    def do_POST(self) -> None:
        # The endpoint as _route will find it (query string dropped): a read-only token must
        # never reach .swap, however the path is dressed up.
        writes = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1] == ".swap"
        if not self._allowed(write=writes):
            return
        data = self._body()
        if data is None or (routed := self._route(create=False)) is None:
            return
        target, key = routed
        if key == ".swap" and not writes:  # pragma: no cover - both parse the same path
            return self._error(HTTPStatus.FORBIDDEN, "this token may only read")
        value = parse_json(data)
        if key == ".has":
            return self._json(HTTPStatus.OK, sorted(self._backend(target).has(key_list(value))))
        if key == ".sizes":
            return self._json(HTTPStatus.OK, self._backend(target).sizes(key_list(value)))
        if key == ".swap":
            ref, old, new = swap_request(value)
            ok = self._backend(target).swap_ref(ref, old, new)
            return self._json(HTTPStatus.OK if ok else HTTPStatus.CONFLICT, {"ok": ok})
        self._error(HTTPStatus.NOT_FOUND, "no such endpoint")


class MgitServer(ThreadingHTTPServer):
    """The server: one thread per connection, at most ``max_connections`` of them; each
    connection closed after ``idle_timeout`` seconds without data."""

    daemon_threads = True

    def __init__(
        self,
        root: str | Path,
        host: str = "127.0.0.1",
        port: int = 8790,
        tokens: dict[str, str] | None = None,
        max_body: int = MAX_OBJECT_BYTES + 4096,
        verbose: bool = False,
        idle_timeout: float = IDLE_TIMEOUT_S,
        max_connections: int = MAX_CONNECTIONS,
    ):
        self.root = Path(root).resolve()
        if not self.root.is_dir():
            raise BadInputError(f"{root} is not a directory")
        if idle_timeout <= 0 or max_connections < 1:
            raise BadInputError("the idle timeout must be positive and at least one connection allowed")
        self.tokens, self.max_body, self.verbose = tokens, max_body, verbose
        self.idle_timeout, self.max_connections = idle_timeout, max_connections
        self.create_lock = threading.Lock()
        self.min_rate = MIN_BODY_RATE
        self._slots = threading.BoundedSemaphore(max_connections)
        self._deadlines: dict[_Handler, float] = {}
        self._deadline_lock = threading.Lock()
        self._closing = threading.Event()
        super().__init__((host, port), _Handler)
        threading.Thread(target=self._reap, name="mgit-serve-reaper", daemon=True).start()

    def watch(self, handler: _Handler, seconds: float) -> None:
        """Cut ``handler`` off unless it is unwatched within ``seconds``."""
        with self._deadline_lock:
            self._deadlines[handler] = time.monotonic() + seconds

    def unwatch(self, handler: _Handler) -> None:
        with self._deadline_lock:
            self._deadlines.pop(handler, None)

    def _reap(self) -> None:
        """Cut off clients past their deadline (slow ones: each read within the idle timeout,
        yet the request never completes)."""
        while not self._closing.wait(min(1.0, self.idle_timeout / 4)):
            now = time.monotonic()
            with self._deadline_lock:
                late = [h for h, due in self._deadlines.items() if due < now]
                for h in late:
                    del self._deadlines[h]
            for h in late:
                h.cut_off()

    def server_close(self) -> None:
        self._closing.set()
        super().server_close()

    def process_request(self, request: Any, client_address: Any) -> None:
        """Serve the connection on a thread if a slot is free, else answer 503 at once."""
        if not self._slots.acquire(blocking=False):
            _refuse_busy(request)
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._slots.release()
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._slots.release()

    @property
    def url(self) -> str:
        host, port = self.server_address[:2]
        assert isinstance(host, str)  # bound: getsockname()'s (host, port), a str host
        return f"http://{host}:{port}"


def _refuse_busy(request: socket.socket) -> None:
    """A 503 with its one-line reason, written without a handler thread (best effort)."""
    body = json.dumps({"error": BUSY}).encode()
    head = (
        f"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Retry-After: 1\r\nConnection: close\r\n\r\n"
    )
    try:
        request.settimeout(1.0)
        request.sendall(head.encode() + body)
    except OSError:
        pass
