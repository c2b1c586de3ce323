"""A remote's URL → its backend: a directory path (a remote directory or a working repository),
http(s)://host:port/repo, or s3://bucket/prefix."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from mgit.errors import AuthError, BadInputError

if TYPE_CHECKING:
    from mgit.remote.backend import Backend


def read_token(token_file: str | None) -> str | None:
    """The bearer token: MGIT_TOKEN, else the first line of ``token_file``."""
    token = os.environ.get("MGIT_TOKEN")
    if token:
        return token.strip()
    if not token_file:
        return None
    try:
        return Path(token_file).expanduser().read_text().strip().splitlines()[0].strip()
    except (OSError, IndexError):
        raise AuthError(f"cannot read a token from {token_file}; check the file (or set MGIT_TOKEN)") from None


def is_url(url: str) -> bool:
    return url.startswith(("http://", "https://", "s3://"))


def open_backend(url: str, token_file: str | None = None, create: bool = False) -> Backend:
    """The backend for ``url``; ``create`` lets a directory remote be made by a first push."""
    if url.startswith(("http://", "https://")):
        from mgit.remote.http import HttpBackend

        return HttpBackend(url, read_token(token_file))
    if url.startswith("s3://"):
        from mgit.remote.s3 import S3Backend

        return S3Backend(url)
    if "://" in url:
        raise BadInputError(f"unsupported remote URL {url!r}: use a directory, http(s)://… or s3://…")
    from mgit.remote.working import WorkingRepositoryBackend, is_working_repository

    if is_working_repository(url):  # another repository on this machine, as `git clone /path` takes
        return WorkingRepositoryBackend(url)
    from mgit.remote.local import DirectoryBackend

    return DirectoryBackend(url, create=create)
