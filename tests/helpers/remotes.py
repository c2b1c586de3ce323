"""Helpers for tests of remotes: a backend ``put`` that dies part-way through a push."""

from __future__ import annotations

import threading


def cut_after(put, chunks: int, error: Exception):
    """A backend ``put`` that lets the first ``chunks`` chunks through, then fails every later
    one with ``error`` (a connection lost mid-push); ``.sent`` lists the keys that arrived."""
    lock, sent = threading.Lock(), []

    def dying(self, key, data):
        with lock:
            if key.startswith("chunks/") and sum(k.startswith("chunks/") for k in sent) >= chunks:
                raise error
            sent.append(key)
        put(self, key, data)

    dying.sent = sent
    return dying
