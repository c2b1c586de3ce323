"""Durability helpers shared by every layer that renames files into place."""

from __future__ import annotations

import os
import uuid
from pathlib import Path


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: the new name lives in the directory's own data."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(
    path: Path, data: bytes, mode: int | None = None, tmp_name: str | None = None, sync_dir: bool = True
) -> None:
    """Replace ``path`` with ``data`` durably: a temporary file in the same directory (named
    ``tmp_name``, default ``NAME.tmp-RANDOM``), fsync'ed, given ``mode``, renamed into place,
    the directory fsync'ed (``sync_dir=False`` skips that where a lost name costs nothing: a
    content-addressed file the next transfer sends again). Any error removes the temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(tmp_name or f"{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if sync_dir:
        fsync_dir(path.parent)
