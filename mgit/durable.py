"""Durability helpers shared by every layer that renames files into place."""

from __future__ import annotations

import errno
import os
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

_datasync = getattr(os, "fdatasync", os.fsync)  # macOS has no fdatasync


def fsync_dir(directory: Path) -> None:
    """Make a rename durable: the new name lives in the directory's own data."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def pwrite_all(fd: int, data: bytes | bytearray | memoryview, offset: int, name: os.PathLike[str] | str | None) -> None:
    """pwrite all of ``data`` at ``offset``: a short write is retried, and one that writes
    nothing reports ENOSPC (naming the file ``name``) instead of looping or returning a short
    count. Every mgit write loop over a raw file descriptor is this one."""
    view = memoryview(data)
    try:
        while view:
            n = os.pwrite(fd, view, offset)
            if n <= 0:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            view, offset = view[n:], offset + n
    except OSError as exc:
        if name is not None and exc.filename is None:
            raise OSError(exc.errno, exc.strerror, os.fspath(name)) from None
        raise


def atomic_write(
    path: Path,
    data: bytes,
    mode: int | None = None,
    tmp_name: str | None = None,
    sync_dir: bool = True,
    tmp_dir: Path | None = None,
) -> None:
    """Replace ``path`` with ``data`` durably: a temporary file in the same directory (or in
    ``tmp_dir``, on the same file system: where a sweep finds those a kill left; named
    ``tmp_name``, default ``NAME.tmp-RANDOM``), fsync'ed, given ``mode``, renamed into place,
    the directory fsync'ed (``sync_dir=False`` skips that where a lost name costs nothing: a
    content-addressed file the next transfer sends again). Any error removes the temporary file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    name = tmp_name or f"{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    if tmp_dir is not None:
        tmp_dir.mkdir(parents=True, exist_ok=True)
    tmp = (tmp_dir or path.parent) / name
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


class Writeback:
    """Writes a growing file to the disk while it grows, so the fsync that makes it durable waits
    only for its tail.

    Why: without it the kernel keeps a pack of a GB or more in the page cache until the seal's
    fsync, which then writes all of it while nothing else runs. Here, after every ``every`` bytes
    appended, one background thread flushes what is there (``fdatasync`` releases the GIL), so
    reading, compressing and writing overlap. At most one flush runs at a time; a failed one
    (EIO, ENOSPC on writeback) is raised by :meth:`finish`.
    """

    def __init__(self, fileno: Callable[[], int], flush: Callable[[], None], every: int = 64 << 20):
        self._fileno, self._flush, self._every = fileno, flush, every
        self._started = 0  # offset up to which a flush was started
        self._pending: Future[None] | None = None
        self._pool: ThreadPoolExecutor | None = None

    def wrote(self, offset: int) -> None:
        """The file now holds ``offset`` bytes (some perhaps still in the caller's buffer)."""
        if offset - self._started < self._every or (self._pending is not None and not self._pending.done()):
            return
        self._raise_failed()
        self._flush()  # hand the buffered bytes to the kernel first
        self._started = offset
        if self._pool is None:
            self._pool = ThreadPoolExecutor(1, thread_name_prefix="mgit-writeback")
        self._pending = self._pool.submit(_datasync, self._fileno())

    def finish(self) -> None:
        """Wait for the running flush, raising its error; call before the file's final fsync."""
        try:
            self._raise_failed(wait=True)
        finally:
            self._stop()

    def cancel(self) -> None:
        """Wait for the running flush and forget its outcome (the file is being deleted)."""
        try:
            self._raise_failed(wait=True)
        except OSError:
            pass
        finally:
            self._stop()

    def _raise_failed(self, wait: bool = False) -> None:
        pending, self._pending = self._pending, None
        if pending is not None and (wait or pending.done()):
            pending.result()
        elif pending is not None:
            self._pending = pending

    def _stop(self) -> None:
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
