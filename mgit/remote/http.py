"""A remote served by `mgit serve` (see server.py for the protocol), over urllib3.

Connections come from urllib3's pool: kept alive between requests, at most TRANSFER_THREADS of
them (the threads of one push or fetch share the backend; a further thread waits for a free
connection rather than opening one more), and one the server closed is replaced before it is
used. urllib3's Retry asks again (see :func:`retry_policy`): once when an answer never came,
and BUSY_RETRIES times, with growing waits, when the server was busy (503: all its connections
taken), before one line names the server's reason. Replies are read with a bound
(MAX_REPLY_BYTES), never whole.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import TypeVar
from urllib.parse import urlsplit

import urllib3
from urllib3.exceptions import HTTPError, MaxRetryError, ProtocolError
from urllib3.util import Retry, Timeout

from mgit.errors import AuthError, BadInputError, RemoteError
from mgit.remote.backend import (
    MAX_OBJECT_BYTES,
    Backend,
    MissingObjectError,
    check_key,
    checked_refs,
    checked_sizes,
)
from mgit.remote.server import NO_REPOSITORY
from mgit.remote.transfer import TRANSFER_THREADS

TIMEOUT_S = 60  # to connect, and for each read of a reply
BUSY_RETRIES = 4  # times a busy server (503) is asked again ...
BUSY_BACKOFF_S = 0.25  # ... after urllib3's waits: 0, then 2, 4, 8 ... times this (0, 0.5, 1, 2 s)
MAX_REPLY_BYTES = MAX_OBJECT_BYTES + 2**20  # objects, or the JSON of a long ref list
_Reply = TypeVar("_Reply")  # the JSON type a reply must have (list, dict)


def retry_policy() -> Retry:
    """What is asked again. A request whose answer never came (its kept-alive connection closed
    by the server as it went out, a server that died or stayed silent for TIMEOUT_S) is sent
    once more, whatever it is: GET and the POSTs .has / .sizes only read, a PUT stores content
    under its own id, and a .swap repeated after its first copy was applied answers 409, which
    :meth:`HttpBackend.swap_ref` resolves. A connection that cannot be opened is not retried
    (nothing was sent; asking again would only double the wait), nor are redirects followed. A
    503 is retried for every method: the server refuses it before reading the request. The
    server's Retry-After is not obeyed (a hostile server could name hours): the waits are ours."""
    return Retry(
        total=None,
        connect=0,
        read=1,
        other=0,
        status=BUSY_RETRIES,
        status_forcelist=(503,),
        allowed_methods=("GET", "PUT", "POST"),
        backoff_factor=BUSY_BACKOFF_S,
        respect_retry_after_header=False,
        raise_on_status=False,  # the last 503 comes back: its body names the server's reason
    )


def _why(exc: HTTPError) -> str:
    """The socket's words (``[Errno 111] Connection refused``, ``timed out``) under urllib3's
    wrappers, which name pools and connection objects; on one line."""
    reason: BaseException = exc.reason if isinstance(exc, MaxRetryError) and exc.reason else exc
    if isinstance(reason, ProtocolError) and len(reason.args) > 1 and isinstance(reason.args[1], BaseException):
        reason = reason.args[1]
    while isinstance(reason, HTTPError) and reason.__cause__ is not None:
        reason = reason.__cause__
    return " ".join(str(reason).split()) or type(reason).__name__


class HttpBackend(Backend):
    def __init__(self, url: str, token: str | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.path.strip("/"):
            raise BadInputError(f"not a remote URL: {url!r} (expected http://host:port/repository)")
        self.url = url.rstrip("/")
        self._scheme, self._host, self._port = parts.scheme, parts.hostname, parts.port
        self._base = "/" + parts.path.strip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._pools = urllib3.PoolManager(
            num_pools=1,
            maxsize=TRANSFER_THREADS,
            block=True,  # a thread beyond maxsize waits for a connection: never one opened and thrown away
            timeout=Timeout(connect=TIMEOUT_S, read=TIMEOUT_S),
            retries=retry_policy(),
        )

    def close(self) -> None:
        """Close the idle connections (a later request opens new ones)."""
        self._pools.clear()

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body); see :meth:`_exchange`."""
        status, data, _ = self._exchange(method, path, body)
        return status, data

    def _exchange(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes, bool]:
        """(status, body, resent: whether the request went out again after its connection
        dropped, so that an earlier copy may have been applied). An unreachable server, a
        server still busy after the retries, a refused token: one line."""
        pool = self._pools.connection_from_host(self._host, self._port, self._scheme)
        try:
            response = pool.urlopen(
                method,
                f"{self._base}/{path}",
                body=body,
                headers=self._headers,
                redirect=False,
                preload_content=False,
                decode_content=False,
            )
            try:
                data = response.read(MAX_REPLY_BYTES + 1)
                if len(data) > MAX_REPLY_BYTES:  # no object is that large: a hostile or broken server
                    response.close()  # the rest stays unread: this connection serves nothing more
                    raise RemoteError(f"{self.url} sent more than {MAX_REPLY_BYTES} bytes for {path}; refusing it")
            finally:
                response.release_conn()
        except HTTPError as exc:
            raise RemoteError(f"cannot reach {self.url}: {_why(exc)}; is `mgit serve` running?") from None
        if response.status == 503:
            raise RemoteError(f"{self.url} is busy: {self._message(data)}")
        if response.status == 401:
            raise AuthError(f"{self.url} wants a valid token: set MGIT_TOKEN or `mgit remote add --token-file`")
        if response.status == 403:
            raise AuthError(f"{self.url} refused the write: the token is read-only")
        history = response.retries.history if response.retries else ()
        return response.status, data, any(attempt.error is not None for attempt in history)

    def _json(self, data: bytes, kind: type[_Reply]) -> _Reply:
        try:
            value = json.loads(data)
        except ValueError:
            value = None
        if not isinstance(value, kind):
            raise RemoteError(f"{self.url} sent a malformed reply (not a JSON {kind.__name__}); is it an mgit server?")
        return value

    @staticmethod
    def _message(data: bytes) -> str:
        try:
            return str(json.loads(data)["error"])
        except (ValueError, KeyError, TypeError):
            return data[:200].decode(errors="replace")

    def get(self, key: str) -> bytes:
        status, data = self._request("GET", check_key(key))
        if status == 404:
            raise MissingObjectError(f"{self.url} has no {key}")
        if status != 200:
            raise RemoteError(f"{self.url}: GET {key} failed: {self._message(data)}")
        return data

    def put(self, key: str, data: bytes) -> None:
        status, reply = self._request("PUT", check_key(key), data)
        if status not in (200, 201):
            raise RemoteError(f"{self.url} refused {key}: {self._message(reply)}")

    def has(self, keys: Iterable[str]) -> set[str]:
        keys = [check_key(k) for k in keys]
        if not keys:
            return set()
        status, data = self._request("POST", ".has", json.dumps(keys).encode())
        if status == 404:
            return set()  # no repository there yet
        if status != 200:
            raise RemoteError(f"{self.url}: existence check failed: {self._message(data)}")
        present = self._json(data, list)
        return {k for k in present if k in set(keys)}

    def sizes(self, keys: Iterable[str]) -> dict[str, int]:
        keys = [check_key(k) for k in keys]
        if not keys:
            return {}
        status, data = self._request("POST", ".sizes", json.dumps(keys).encode())
        if status == 404 and self._message(data) == NO_REPOSITORY:
            return {}  # no repository there yet
        if status == 404:
            raise RemoteError(f"{self.url} does not answer size queries (an older `mgit serve`?); upgrade the server")
        if status != 200:
            raise RemoteError(f"{self.url}: size query failed: {self._message(data)}")
        try:
            value = json.loads(data)
        except ValueError:
            value = None
        return checked_sizes(self.url, keys, value)

    def refs(self) -> dict[str, str]:
        status, data = self._request("GET", ".refs")
        if status == 404:
            return {}
        if status != 200:
            raise RemoteError(f"{self.url}: listing refs failed: {self._message(data)}")
        return checked_refs(self.url, self._json(data, dict))

    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        """As :meth:`Backend.swap_ref`. A swap sent again when its answer never came (see
        :func:`retry_policy`) may find the ref moved by its own first copy: a 409 then counts as
        done when the ref is now ``new`` (the state asked for, whoever set it), instead of
        telling the user that someone else pushed first."""
        body = json.dumps({"ref": check_key(name), "old": old, "new": new}).encode()
        status, data, resent = self._exchange("POST", ".swap", body)
        if status == 409:
            return resent and self.refs().get(name) == new
        if status != 200:
            raise RemoteError(f"{self.url}: updating {name} failed: {self._message(data)}")
        return True
