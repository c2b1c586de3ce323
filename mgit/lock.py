"""One writer at a time: an advisory lock on ``.mgit/lock``.

flock() is released by the kernel when its holder dies, so a lock left by a killed
process is broken automatically; the file carries the holder's pid for the message.
The pid is a courtesy: failing to write it (a full disk) never fails the command.

Whoever holds the lock is the only mgit process writing in ``.mgit/``, so a git lock file
(dulwich's ``<file>.lock``) found there was left by a killed process: the holder removes
it (saying so), else every later ref or object write would fail on it.
"""

from __future__ import annotations

import fcntl
import os
import sys
from collections.abc import Callable
from pathlib import Path

from mgit import _crashpoints
from mgit.errors import LockedError

GIT_LOCK_SUFFIX = ".lock"
# Where dulwich writes through lock files: HEAD, config, packed-refs at the top; refs and
# reflogs below refs/ and logs/; loose objects in objects/<2 hex>/.
_LOCK_DIRS = ("refs", "logs")


def stale_git_locks(git_dir: Path, objects: bool = True) -> list[Path]:
    """Every git lock file under ``git_dir`` (stale when the repository lock is held);
    ``objects``: also in the object directories (a listing of every loose object)."""
    found = [p for p in _entries(git_dir) if _is_git_lock(p)]
    for top in _LOCK_DIRS:
        for dirpath, _, names in os.walk(git_dir / top):
            found += [Path(dirpath) / n for n in names if n.endswith(GIT_LOCK_SUFFIX)]
    for sub in _entries(git_dir / "objects") if objects else []:
        if len(sub.name) == 2 or sub.name == "pack":
            found += [p for p in _entries(sub) if _is_git_lock(p)]
    return sorted(found)


def _entries(directory: Path) -> list[Path]:
    try:
        with os.scandir(directory) as it:
            return [Path(e.path) for e in it]
    except (FileNotFoundError, NotADirectoryError):
        return []


def _is_git_lock(path: Path) -> bool:
    return path.name.endswith(GIT_LOCK_SUFFIX) and path.is_file()


def remove_stale_git_locks(git_dir: Path, say: Callable[[str], None] | None = None, objects: bool = True) -> list[Path]:
    """Delete the git lock files a killed mgit left (caller holds the repository lock)."""
    removed = []
    for path in stale_git_locks(git_dir, objects):
        try:
            path.unlink()
        except FileNotFoundError:
            continue
        removed.append(path)
        if say is not None:
            say(f"removed stale lock file {path} (left by a killed mgit process)")
    return removed


def warn(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr, flush=True)  # in order with the console's lines


class RepoLock:
    def __init__(self, path: Path, on_acquire: Callable[[], None] | None = None):
        self.path = path
        self._fd: int | None = None
        self._depth = 0
        # run once each time the lock is taken (outermost level): recovery of what a killed
        # holder left, e.g. finishing an interrupted checkout
        self.on_acquire = on_acquire
        self.cleaned: list[Path] = []  # stale git lock files removed when the lock was last taken

    @property
    def held(self) -> bool:
        return self._depth > 0

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
            self._fd = fd
            self._depth = 1
            try:
                # a pid still in the file: its holder died without releasing (killed), so it
                # may have left lock files among the objects too; else the cheap places only
                killed = bool(os.pread(fd, 64, 0).strip())
                self.cleaned = remove_stale_git_locks(self.path.parent, warn, objects=killed)
                _note_pid(fd)
                if self.on_acquire is not None:
                    self.on_acquire()
            except BaseException:
                self._release()
                raise
            return self
        self._depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        self._depth -= 1
        if self._depth == 0:
            self._release()

    def _release(self) -> None:
        self._depth = 0
        if self._fd is None:
            return
        _crashpoints.point("unlock")
        try:
            os.ftruncate(self._fd, 0)
        except OSError:
            pass  # only the message of a waiting process uses the pid
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None


def _note_pid(fd: int) -> None:
    """Write our pid for other processes' messages; a full disk only loses the courtesy."""
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    except OSError:
        pass
