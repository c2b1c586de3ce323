"""A remote that is a directory (on this machine or a mounted share): one file per key.

Objects are written to a temporary name and renamed into place, so a killed push never
leaves a partial object visible; refs change under an exclusive lock on ``lock``, so two
pushers cannot both win a compare-and-swap. The same class serves repositories for
``mgit serve``.
"""

from __future__ import annotations

import fcntl
import os
import stat
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from mgit.durable import atomic_write
from mgit.errors import RemoteError
from mgit.remote.backend import (
    HEAD_KEY,
    Backend,
    MissingObjectError,
    check_key,
    check_ref_update,
    checked_refs,
)

MARKER = "mgit-remote"  # a file naming the directory an mgit remote


class DirectoryBackend(Backend):
    def __init__(self, root: str | os.PathLike[str], create: bool = False):
        self.root = Path(root).resolve()
        self.url = str(self.root)
        if not (self.root / MARKER).is_file():
            if (self.root / ".mgit").is_dir():
                raise RemoteError(
                    f"{self.root} is a working repository, not a remote: pushing into its checked-out branch is "
                    "refused; push to a remote directory (or pull from that repository's side)"
                )
            if not create:
                raise RemoteError(f"{self.root} is not an mgit remote (no {MARKER} file); push to create it")
            self.root.mkdir(parents=True, exist_ok=True)
            if any(p.name != MARKER for p in self.root.iterdir()):
                raise RemoteError(f"{self.root} is not empty and not an mgit remote; choose an empty directory")
            atomic_write(self.root / MARKER, b"mgit remote, format 1\n")

    def _path(self, key: str) -> Path:
        return self.root / check_key(key)

    def get(self, key: str) -> bytes:
        try:
            return self._path(key).read_bytes()
        except (FileNotFoundError, NotADirectoryError, IsADirectoryError):  # absent, or a ref path clash
            raise MissingObjectError(f"{self.url} has no {key}") from None

    def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        if not path.exists():
            # content-addressed and many: no directory fsync per object (the ref moved after them syncs its own)
            atomic_write(path, data, sync_dir=False)

    def has(self, keys: Iterable[str]) -> set[str]:
        return {k for k in keys if self._path(k).is_file()}

    def sizes(self, keys: Iterable[str]) -> dict[str, int]:
        out = {}
        for k in keys:
            try:
                st = self._path(k).stat()
            except (FileNotFoundError, NotADirectoryError):  # absent, or under a file (refs/heads/main/x)
                continue
            if stat.S_ISREG(st.st_mode):
                out[k] = st.st_size
        return out

    def raw_refs(self) -> dict[str, str]:
        """Every ref as stored, unchecked (``mgit serve`` sends them so that the client names
        a damaged one)."""
        out = {}
        for kind in ("heads", "tags", "mgit/sketches"):
            top = self.root / "refs" / kind
            for path in _files(top):
                if ".tmp-" in path.name:
                    continue
                out[path.relative_to(self.root).as_posix()] = path.read_text(errors="replace").strip()
        return out

    def refs(self) -> dict[str, str]:
        return checked_refs(self.url, self.raw_refs())

    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        """As :meth:`Backend.swap_ref`; a value that is no commit held here with its whole graph,
        or a name clashing with another ref, is refused (BadRefError) before the lock."""
        path = self._path(name)
        check_ref_update(self, name, new, self.raw_refs())
        with self._locked():
            current = path.read_text(errors="replace").strip() if path.is_file() else None
            if current != old:
                return False
            if new is None:
                path.unlink(missing_ok=True)
            else:
                atomic_write(path, f"{new}\n".encode())
            if new is not None and name.startswith("refs/heads/") and not (self.root / HEAD_KEY).exists():
                atomic_write(self.root / HEAD_KEY, f"ref: {name}\n".encode())
        return True

    @contextmanager
    def _locked(self) -> Iterator[None]:
        fd = os.open(self.root / "lock", os.O_CREAT | os.O_RDWR, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _files(top: Path) -> Iterator[Path]:
    for dirpath, _, names in os.walk(top):
        for name in names:
            yield Path(dirpath) / name
