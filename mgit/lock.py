"""One writer at a time: an advisory lock on ``.mgit/lock``.

flock() is released by the kernel when its holder dies, so a lock left by a killed
process is broken automatically; the file carries the holder's pid for the message.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from mgit.errors import LockedError


class RepoLock:
    def __init__(self, path: Path):
        self.path = path
        self._fd: int | None = None
        self._depth = 0

    def __enter__(self) -> RepoLock:
        if self._depth == 0:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
                os.close(fd)
                raise LockedError(
                    f"another mgit process (pid {holder}) is working on this repository; wait for it to finish"
                ) from None
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
            self._fd = fd
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0 and self._fd is not None:
            os.ftruncate(self._fd, 0)
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
