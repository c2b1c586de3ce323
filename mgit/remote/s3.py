"""A remote in S3-compatible object storage (s3://bucket/prefix), through boto3.

Credentials, region and endpoint come from the usual AWS variables and config files
(``AWS_ENDPOINT_URL`` for S3-compatible stores). An S3 PUT is atomic, so an object is visible
only once complete. Refs move with conditional writes — ``If-None-Match: *`` to create,
``If-Match: <ETag>`` to replace or delete — so of two pushers racing for a ref exactly one wins.
Which objects exist is answered from one listing per prefix, kept for the backend's life
(objects are immutable; a stale answer only means sending an object again).
"""

from __future__ import annotations

import threading
from collections.abc import Iterable
from urllib.parse import urlsplit

from mgit.errors import AuthError, BadInputError, RemoteError
from mgit.remote.backend import HEAD_KEY, Backend, MissingObjectError, check_key, checked_refs

_AUTH_CODES = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken", "InvalidToken"}


class S3Backend(Backend):
    def __init__(self, url: str):
        import boto3
        from botocore.config import Config

        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise BadInputError(f"not an S3 URL: {url!r} (expected s3://bucket/prefix)")
        self.url = url.rstrip("/")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/") + "/" if parts.path.strip("/") else ""
        self.client = boto3.client("s3", config=Config(retries={"max_attempts": 3}, max_pool_connections=16))
        self._listed: dict[str, dict[str, int]] = {}  # top-level prefix → key → size
        self._lock = threading.Lock()

    # -- errors -------------------------------------------------------------------------------

    def _translate(self, exc: Exception) -> Exception:
        """A boto error as the one-line MgitError a user sees; other errors unchanged (the
        caller handles those it expects, e.g. a missing key)."""
        from botocore.exceptions import BotoCoreError, ClientError, NoCredentialsError

        if isinstance(exc, NoCredentialsError):
            return AuthError(f"{self.url}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)")
        if isinstance(exc, ClientError):
            code = self._code(exc)
            if code in _AUTH_CODES:
                return AuthError(f"{self.url}: access denied ({code}); check the credentials")
            if code == "NoSuchBucket":
                return RemoteError(f"{self.url}: bucket {self.bucket!r} does not exist; create it first")
            return exc
        if isinstance(exc, BotoCoreError):
            return RemoteError(f"cannot reach {self.url}: {exc}")
        return exc

    def _call(self, fn, **kwargs):  # noqa: ANN001, ANN202 - a thin wrapper over boto3 calls
        try:
            return fn(Bucket=self.bucket, **kwargs)
        except Exception as exc:
            translated = self._translate(exc)
            if translated is exc:
                raise
            raise translated from None

    @staticmethod
    def _code(exc: Exception) -> str:
        return getattr(exc, "response", {}).get("Error", {}).get("Code", "")

    # -- objects ------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            reply = self._call(self.client.get_object, Key=self.prefix + check_key(key))
        except ClientError as exc:
            if self._code(exc) in ("NoSuchKey", "404"):
                raise MissingObjectError(f"{self.url} has no {key}") from None
            raise RemoteError(f"{self.url}: reading {key} failed: {exc}") from None
        return reply["Body"].read()

    def put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import ClientError

        try:
            self._call(self.client.put_object, Key=self.prefix + check_key(key), Body=data)
        except ClientError as exc:
            raise RemoteError(f"{self.url}: writing {key} failed: {exc}") from None
        top = key.split("/", 1)[0]
        with self._lock:
            if top in self._listed:
                self._listed[top][key] = len(data)

    def _keys(self, top: str) -> dict[str, int]:
        """Every key under ``top/`` with its size, from one listing kept for the backend's life."""
        with self._lock:
            if top in self._listed:
                return self._listed[top]
        found = {}
        pages = self.client.get_paginator("list_objects_v2")
        try:  # paginate defers its calls: errors come from the loop
            for page in pages.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}{top}/"):
                found.update((item["Key"].removeprefix(self.prefix), item["Size"]) for item in page.get("Contents", []))
        except Exception as exc:
            translated = self._translate(exc)
            raise (RemoteError(f"{self.url}: listing failed: {exc}") if translated is exc else translated) from None
        with self._lock:
            self._listed[top] = found
        return found

    def has(self, keys: Iterable[str]) -> set[str]:
        keys = [check_key(k) for k in keys]
        out = set()
        for top in {k.split("/", 1)[0] for k in keys if "/" in k}:
            out |= self._keys(top).keys() & set(keys)
        return out

    def sizes(self, keys: Iterable[str]) -> dict[str, int]:
        keys = [check_key(k) for k in keys]
        out = {}
        for top in {k.split("/", 1)[0] for k in keys if "/" in k}:
            listed = self._keys(top)
            out |= {k: listed[k] for k in keys if k in listed}
        return out

    # -- refs ---------------------------------------------------------------------------------

    def refs(self) -> dict[str, str]:
        with self._lock:
            self._listed.pop("refs", None)  # refs change: list them afresh
        out = {}
        for key in sorted(self._keys("refs")):
            if key.startswith(("refs/heads/", "refs/tags/")):
                try:
                    out[key] = self.get(key).decode(errors="replace").strip()
                except MissingObjectError:
                    continue  # deleted meanwhile
        return checked_refs(self.url, out)

    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        from botocore.exceptions import ClientError

        key = self.prefix + check_key(name)
        try:
            current = self._call(self.client.get_object, Key=key)
            value, etag = current["Body"].read().decode(errors="replace").strip(), current["ETag"]
        except ClientError as exc:
            if self._code(exc) not in ("NoSuchKey", "404"):
                raise RemoteError(f"{self.url}: reading {name} failed: {exc}") from None
            value, etag = None, None
        if value != old:
            return False
        condition = {"IfMatch": etag} if etag is not None else {"IfNoneMatch": "*"}
        try:
            if new is None:
                self._call(self.client.delete_object, Key=key, **condition)
            else:
                self._call(self.client.put_object, Key=key, Body=f"{new}\n".encode(), **condition)
        except ClientError as exc:
            if self._code(exc) in ("PreconditionFailed", "ConditionalRequestConflict", "412", "409"):
                return False  # someone else moved it first
            raise RemoteError(f"{self.url}: updating {name} failed: {exc}") from None
        if new is not None and name.startswith("refs/heads/"):
            try:
                self._call(self.client.put_object, Key=self.prefix + HEAD_KEY,
                           Body=f"ref: {name}\n".encode(), IfNoneMatch="*")  # fmt: skip
            except ClientError:
                pass  # HEAD already names a branch
        return True
