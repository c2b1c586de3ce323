"""A remote that is a directory (on this machine or a mounted share): one file per key.

Objects are written to a temporary name in ``tmp/`` and renamed into place, so a killed push
never leaves a partial object visible; each ref update then deletes the temporaries there
older than an hour (a push killed mid-write leaves its own; one still being written is far
younger). Refs change under an exclusive lock on ``lock``, so two pushers cannot both win a
compare-and-swap. The same class serves repositories for ``mgit serve``.
"""

from __future__ import annotations

import fcntl
import os
import stat
import time
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
TMP_DIR = "tmp"  # the temporary files of writes in flight (no key starts with it)
# A temporary this old belongs to no live write (a file of a few MiB at most takes seconds): as
# gc's default grace period (docs/format.md §15.2).
TMP_GRACE_SECONDS = 3600.0


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
            if any(p.name not in (MARKER, TMP_DIR) for p in self.root.iterdir()):  # tmp/: a first push killed
                raise RemoteError(f"{self.root} is not empty and not an mgit remote; choose an empty directory")
            self._write(self.root / MARKER, b"mgit remote, format 1\n")

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
            self._write(path, data, sync_dir=False)

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
                try:
                    value = path.read_text(errors="replace").strip()
                except FileNotFoundError:  # deleted by a concurrent swap since the listing: no longer a ref
                    continue
                out[path.relative_to(self.root).as_posix()] = value
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
                self._write(path, f"{new}\n".encode())
            if new is not None and name.startswith("refs/heads/") and not (self.root / HEAD_KEY).exists():
                self._write(self.root / HEAD_KEY, f"ref: {name}\n".encode())
        self.sweep_temporaries()
        return True

    def _write(self, path: Path, data: bytes, sync_dir: bool = True) -> None:
        atomic_write(path, data, sync_dir=sync_dir, tmp_dir=self.root / TMP_DIR)

    def sweep_temporaries(self, grace_seconds: float = TMP_GRACE_SECONDS) -> list[Path]:
        """Delete the temporary files in ``tmp/`` at least ``grace_seconds`` old: what killed
        pushes left (a live write's is younger). Best effort: a read-only share deletes nothing."""
        removed, now = [], time.time()
        try:
            with os.scandir(self.root / TMP_DIR) as entries:
                for entry in entries:
                    try:
                        if entry.is_file(follow_symlinks=False) and now - entry.stat().st_mtime >= grace_seconds:
                            os.unlink(entry.path)
                            removed.append(Path(entry.path))
                    except OSError:
                        continue
        except OSError:
            pass
        return removed

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
