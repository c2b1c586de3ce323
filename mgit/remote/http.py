"""A remote served by `mgit serve` (see server.py for the protocol), over http.client with one
keep-alive connection per thread."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterable
from typing import TypeVar
from urllib.parse import urlsplit

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

TIMEOUT_S = 60
BUSY_RETRIES = (0.2, 0.5, 1.0, 2.0)  # waits before asking a busy server (503) again
MAX_REPLY_BYTES = MAX_OBJECT_BYTES + 2**20  # objects, or the JSON of a long ref list
_Reply = TypeVar("_Reply")  # the JSON type a reply must have (list, dict)


class HttpBackend(Backend):
    def __init__(self, url: str, token: str | None = None):
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname or not parts.path.strip("/"):
            raise BadInputError(f"not a remote URL: {url!r} (expected http://host:port/repository)")
        self.url = url.rstrip("/")
        self._secure = parts.scheme == "https"
        self._host, self._port = parts.hostname, parts.port
        self._base = "/" + parts.path.strip("/")
        self._headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._local = threading.local()

    def _connection(self) -> http.client.HTTPConnection:
        conn = getattr(self._local, "conn", None)
        if conn is None:
            kind = http.client.HTTPSConnection if self._secure else http.client.HTTPConnection
            conn = self._local.conn = kind(self._host, self._port, timeout=TIMEOUT_S)
        return conn

    def _request(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        """(status, body); a busy server (503: all its connections taken) is asked again a few
        times before giving up with one line."""
        for wait in (*BUSY_RETRIES, None):
            status, data = self._request_once(method, path, body)
            if status != 503:
                return status, data
            if wait is not None:
                time.sleep(wait)
        raise RemoteError(f"{self.url} is busy: {self._message(data)}")

    def _request_once(self, method: str, path: str, body: bytes | None = None) -> tuple[int, bytes]:
        headers = dict(self._headers)
        if body is not None:
            headers["Content-Length"] = str(len(body))
        for attempt in (1, 2):  # a kept-alive connection the server closed is retried once
            conn = self._connection()
            try:
                conn.request(method, f"{self._base}/{path}", body=body, headers=headers)
                response = conn.getresponse()
                data = response.read(MAX_REPLY_BYTES + 1)
                if len(data) > MAX_REPLY_BYTES:  # no object is that large: a hostile or broken server
                    conn.close()
                    self._local.conn = None
                    raise RemoteError(f"{self.url} sent more than {MAX_REPLY_BYTES} bytes for {path}; refusing it")
            except (ConnectionError, http.client.HTTPException, OSError) as exc:
                conn.close()
                self._local.conn = None
                if attempt == 2 or isinstance(exc, TimeoutError):
                    raise RemoteError(f"cannot reach {self.url}: {exc}; is `mgit serve` running?") from None
                continue
            if response.status == 401:
                raise AuthError(f"{self.url} wants a valid token: set MGIT_TOKEN or `mgit remote add --token-file`")
            if response.status == 403:
                raise AuthError(f"{self.url} refused the write: the token is read-only")
            return response.status, data
        raise AssertionError("unreachable")

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
        body = json.dumps({"ref": check_key(name), "old": old, "new": new}).encode()
        status, data = self._request("POST", ".swap", body)
        if status == 409:
            return False
        if status != 200:
            raise RemoteError(f"{self.url}: updating {name} failed: {self._message(data)}")
        return True
