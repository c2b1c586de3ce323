"""A remote held in this process's memory: the Backend contract with nothing around it.

For tests: it keeps every promise the other backends keep, without files, sockets or an endpoint,
so transfer tests run in milliseconds and the contract suite has a reference. Each instance is its
own remote (opened by its constructor, no URL); ``stored`` is its key → bytes map, for a test to
inspect or damage.
"""

from __future__ import annotations

import threading
from collections.abc import Iterable

from mgit.remote.backend import (
    HEAD_KEY,
    Backend,
    MissingObjectError,
    check_key,
    check_ref_update,
    checked_refs,
    is_remote_ref,
)


class MemoryBackend(Backend):
    def __init__(self, url: str = "memory://remote"):
        self.url = url
        self.stored: dict[str, bytes] = {}
        self._lock = threading.Lock()

    def get(self, key: str) -> bytes:
        with self._lock:
            data = self.stored.get(check_key(key))
        if data is None:
            raise MissingObjectError(f"{self.url} has no {key}")
        return data

    def put(self, key: str, data: bytes) -> None:
        """As a directory remote: the whole value is copied first (the caller may reuse its
        buffer), then published in one step; an object already held is left as it is."""
        check_key(key)
        value = bytes(data)
        with self._lock:
            self.stored.setdefault(key, value)

    def has(self, keys: Iterable[str]) -> set[str]:
        wanted = [check_key(k) for k in keys]
        with self._lock:
            return {k for k in wanted if k in self.stored}

    def sizes(self, keys: Iterable[str]) -> dict[str, int]:
        wanted = [check_key(k) for k in keys]
        with self._lock:
            return {k: len(self.stored[k]) for k in wanted if k in self.stored}

    def _raw_refs(self) -> dict[str, str]:
        with self._lock:
            return {k: v.decode(errors="replace").strip() for k, v in self.stored.items() if is_remote_ref(k)}

    def refs(self) -> dict[str, str]:
        return checked_refs(self.url, dict(sorted(self._raw_refs().items())))

    def swap_ref(self, name: str, old: str | None, new: str | None) -> bool:
        """As :meth:`Backend.swap_ref`; a value that is no commit held here with its whole graph,
        or a name clashing with another ref, is refused (BadRefError) before the lock."""
        check_key(name)
        check_ref_update(self, name, new, self._raw_refs())
        with self._lock:
            held = self.stored.get(name)
            current = held.decode(errors="replace").strip() if held is not None else None
            if current != old:
                return False
            if new is None:
                self.stored.pop(name, None)
            else:
                self.stored[name] = f"{new}\n".encode()
                if name.startswith("refs/heads/"):
                    self.stored.setdefault(HEAD_KEY, f"ref: {name}\n".encode())
        return True
