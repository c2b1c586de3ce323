"""A remote in S3-compatible object storage (s3://bucket/prefix), through boto3.

Credentials, region and endpoint come from the usual AWS variables and config files
(``AWS_ENDPOINT_URL`` for S3-compatible stores). An S3 PUT is atomic, so an object is visible
only once complete. Refs move with conditional writes — ``If-None-Match: *`` to create,
``If-Match: <ETag>`` to replace or delete — so of two pushers racing for a ref exactly one wins.
Which objects exist is answered from one listing per prefix, kept for the backend's life
(objects are immutable; a stale answer only means sending an object again).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mgit.errors import AuthError, BadInputError, MgitError, RemoteError
from mgit.remote.backend import (
    HEAD_KEY,
    Backend,
    MissingObjectError,
    check_key,
    check_ref_form,
    checked_refs,
    is_remote_ref,
)

# ClientError codes the callers handle themselves (a missing key, a lost conditional write).
_EXPECTED_CODES = {"NoSuchKey", "404", "PreconditionFailed", "ConditionalRequestConflict", "412", "409"}
_REGION_CODES = {"AuthorizationHeaderMalformed", "PermanentRedirect", "IllegalLocationConstraintException", "301"}
_RETRY_CODES = {"SlowDown", "ServiceUnavailable", "InternalError", "RequestTimeout", "500", "503"}


def _first_line(exc: BaseException) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:200]


def s3_error(url: str, bucket: str, endpoint: str | None, exc: BaseException) -> MgitError | None:  # noqa: C901 (one case per boto error a user can fix)
    """The one-line error, naming the variable or setting to fix, for a boto3/botocore error
    (None: a ClientError the caller expects, e.g. a missing key)."""
    from botocore import exceptions as boto

    where = f"the S3 endpoint {endpoint}" if endpoint else "S3"
    if isinstance(exc, boto.PartialCredentialsError):
        var = exc.kwargs.get("cred_var", "the secret key")
        return AuthError(
            f"{url}: incomplete AWS credentials: {var} is missing or empty "
            f"(from {exc.kwargs.get('provider', 'the environment')}); set it"
        )
    if isinstance(exc, boto.NoCredentialsError):
        return AuthError(f"{url}: no AWS credentials (set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE)")
    if isinstance(exc, boto.ProfileNotFound):
        return AuthError(
            f"{url}: AWS_PROFILE names the profile {exc.kwargs.get('profile')!r}, which ~/.aws/config lacks"
        )
    if isinstance(exc, boto.NoRegionError):
        return RemoteError(f"{url}: no AWS region: set AWS_DEFAULT_REGION (e.g. us-east-1)")
    if isinstance(exc, boto.ParamValidationError):
        return BadInputError(f"{url}: {bucket!r} is not a valid S3 bucket name (or the URL is malformed)")
    if isinstance(exc, (boto.EndpointConnectionError, boto.ConnectionError, boto.HTTPClientError)):
        return RemoteError(f"{url}: cannot reach {where} ({_first_line(exc)}); check AWS_ENDPOINT_URL and the network")
    if isinstance(exc, boto.ClientError):
        error = getattr(exc, "response", {}).get("Error", {})
        code, message = str(error.get("Code", "")), str(error.get("Message", "")).strip().splitlines()
        detail = f"{code}: {message[0][:120]}" if message else code
        if code in _EXPECTED_CODES:
            return None
        if code == "InvalidAccessKeyId":
            return AuthError(f"{url}: {where} does not know the access key: check AWS_ACCESS_KEY_ID (or AWS_PROFILE)")
        if code == "SignatureDoesNotMatch":
            return AuthError(f"{url}: the secret key does not match the access key: check AWS_SECRET_ACCESS_KEY")
        if code in ("ExpiredToken", "InvalidToken", "TokenRefreshRequired", "InvalidSecurity"):
            return AuthError(f"{url}: the session token is expired or invalid ({code}): renew AWS_SESSION_TOKEN")
        if code in ("AccessDenied", "AllAccessDisabled", "403"):
            return AuthError(
                f"{url}: access denied ({detail}): the credentials (AWS_ACCESS_KEY_ID / AWS_PROFILE) "
                f"lack permission to list, read or write s3://{bucket}"
            )
        if code == "NoSuchBucket":
            return RemoteError(f"{url}: bucket {bucket!r} does not exist; create it first (or fix the URL)")
        if code == "InvalidBucketName":
            return BadInputError(f"{url}: {bucket!r} is not a valid S3 bucket name")
        if code in _REGION_CODES:
            return RemoteError(f"{url}: the bucket is in another region ({code}): set AWS_DEFAULT_REGION to its region")
        if code == "RequestTimeTooSkewed":
            return RemoteError(f"{url}: this machine's clock is too far off for S3 ({code}): fix the system time")
        if code in _RETRY_CODES:
            return RemoteError(f"{url}: {where} failed ({detail}); try again later")
        return RemoteError(f"{url}: {where} refused the request ({detail})")
    if isinstance(exc, boto.BotoCoreError):
        return RemoteError(f"{url}: S3 error: {_first_line(exc)}")
    return None


class S3Backend(Backend):
    def __init__(self, url: str):
        import boto3
        from botocore.config import Config
        from botocore.exceptions import BotoCoreError

        parts = urlsplit(url)
        if parts.scheme != "s3" or not parts.netloc:
            raise BadInputError(f"not an S3 URL: {url!r} (expected s3://bucket/prefix)")
        self.url = url.rstrip("/")
        self.bucket = parts.netloc
        self.prefix = parts.path.strip("/") + "/" if parts.path.strip("/") else ""
        config = Config(retries={"max_attempts": 3}, max_pool_connections=16)
        try:  # a session of its own: credentials and settings read now, not cached from an earlier backend
            self.client = boto3.session.Session().client("s3", config=config)
        except ValueError as exc:  # botocore: "Invalid endpoint: …"
            endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or "the endpoint"
            raise BadInputError(
                f"{self.url}: AWS_ENDPOINT_URL {endpoint!r} is not a valid URL "
                f"(expected e.g. http://host:9000): {_first_line(exc)}"
            ) from None
        except BotoCoreError as exc:
            raise self._translate(exc) from None
        self._listed: dict[str, dict[str, int]] = {}  # top-level prefix → key → size
        self._lock = threading.Lock()

    # -- errors -------------------------------------------------------------------------------

    def _translate(self, exc: Exception) -> Exception:
        """A boto error as the one-line MgitError a user sees; a ClientError the caller
        expects (a missing key, a lost conditional write) and other errors unchanged."""
        client = getattr(self, "client", None)
        translated = s3_error(self.url, self.bucket, client.meta.endpoint_url if client else None, exc)
        return exc if translated is None else translated

    def _call(self, fn: Callable[..., dict[str, Any]], **kwargs: Any) -> dict[str, Any]:  # a thin wrapper over boto3
        try:
            reply = fn(Bucket=self.bucket, **kwargs)
            if "Body" in reply:  # read here: a connection lost mid-body is translated too
                reply["Body"] = _Read(reply["Body"].read())
            return reply
        except Exception as exc:
            translated = self._translate(exc)
            if translated is exc:
                raise
            raise translated from None

    @staticmethod
    def _code(exc: Exception) -> str:
        code: str = getattr(exc, "response", {}).get("Error", {}).get("Code", "")
        return code

    # -- objects ------------------------------------------------------------------------------

    def get(self, key: str) -> bytes:
        from botocore.exceptions import ClientError

        try:
            reply = self._call(self.client.get_object, Key=self.prefix + check_key(key))
        except ClientError as exc:
            if self._code(exc) in ("NoSuchKey", "404"):
                raise MissingObjectError(f"{self.url} has no {key}") from None
            raise RemoteError(f"{self.url}: reading {key} failed: {_first_line(exc)}") from None
        data: bytes = reply["Body"].read()
        return data

    def put(self, key: str, data: bytes) -> None:
        from botocore.exceptions import ClientError

        try:
            self._call(self.client.put_object, Key=self.prefix + check_key(key), Body=data)
        except ClientError as exc:
            raise RemoteError(f"{self.url}: writing {key} failed: {_first_line(exc)}") from None
        top = key.split("/", 1)[0]
        with self._lock:
            if top in self._listed:
                self._listed[top][key] = len(data)

    def _keys(self, top: str) -> dict[str, int]:
        """Every key under ``top/`` with its size, from one listing kept for the backend's life."""
        with self._lock:
            if top in self._listed:
                return self._listed[top]
        from botocore.exceptions import ClientError

        found: dict[str, int] = {}
        pages = self.client.get_paginator("list_objects_v2")
        try:  # paginate defers its calls: errors come from the loop
            for page in pages.paginate(Bucket=self.bucket, Prefix=f"{self.prefix}{top}/"):
                found.update((item["Key"].removeprefix(self.prefix), item["Size"]) for item in page.get("Contents", []))
        except Exception as exc:
            translated = self._translate(exc)
            if translated is exc and not isinstance(exc, ClientError):
                raise
            raise (
                RemoteError(f"{self.url}: listing failed: {_first_line(exc)}") if translated is exc else translated
            ) from None
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
        out: dict[str, int] = {}
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
            if is_remote_ref(key):
                try:
                    out[key] = self.get(key).decode(errors="replace").strip()
                except MissingObjectError:
                    continue  # deleted meanwhile
        return checked_refs(self.url, out)

    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        from botocore.exceptions import ClientError

        key = self.prefix + check_key(name)
        with self._lock:
            self._listed.pop("refs", None)  # refs change: list them afresh
        check_ref_form(name, new, self._keys("refs"))  # reading every object a commit reaches would cost a GET each
        try:
            current = self._call(self.client.get_object, Key=key)
            value, etag = current["Body"].read().decode(errors="replace").strip(), current["ETag"]
        except ClientError as exc:
            if self._code(exc) not in ("NoSuchKey", "404"):
                raise RemoteError(f"{self.url}: reading {name} failed: {_first_line(exc)}") from None
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
            if etag is not None and self._code(exc) in ("NoSuchKey", "404"):
                return False  # someone else deleted it since it was read
            raise RemoteError(f"{self.url}: updating {name} failed: {_first_line(exc)}") from None
        if new is not None and name.startswith("refs/heads/"):
            try:
                self._call(
                    self.client.put_object, Key=self.prefix + HEAD_KEY, Body=f"ref: {name}\n".encode(), IfNoneMatch="*"
                )
            except ClientError:
                pass  # HEAD already names a branch
        return True


@dataclass
class _Read:
    """An object's body, already read (stands in for boto3's stream)."""

    data: bytes

    def read(self) -> bytes:
        return self.data
