"""Each chunk is asked of the remote once per fetch, even when a delta and its base are fetched
by different threads at the same time (the second waits for the first instead of fetching again:
before, a clone could count — and download — a base twice)."""

from __future__ import annotations

import threading
import time
from collections import Counter

from helpers.models import commit_model, frozen_finetune, llama_state_dict, uneven_finetune

from mgit import Repository
from mgit.progress import Bar
from mgit.remote.local import DirectoryBackend
from mgit.remote.transfer import Transfer, chunks_of, fetch_chunks


class SlowBases(DirectoryBackend):
    """Counts every chunk get; a delta base arrives slowly, so a delta fetched by another thread
    reaches its base while the base is still on its way."""

    def __init__(self, root, bases: set[str]):
        super().__init__(root)
        self.bases, self.gets, self.lock = bases, Counter(), threading.Lock()

    def get(self, key: str) -> bytes:
        with self.lock:
            self.gets[key] += 1
        if key.removeprefix("chunks/") in self.bases:
            time.sleep(0.3)
        return super().get(key)


def test_a_delta_base_wanted_twice_is_fetched_once(tmp_path):
    src = Repository.init(tmp_path / "src")
    base = llama_state_dict()
    commit_model(src, base, "base")
    commit_model(src, frozen_finetune(uneven_finetune(base, seed=5), {0}), "fine-tune")
    remote = tmp_path / "remote"
    src.remote_add("origin", str(remote))
    src.push()
    wanted = chunks_of(src.graph, [src.resolve("HEAD"), src.resolve("HEAD~1")])
    bases = {loc.base for c in wanted if (loc := src.store.location(c)) is not None and loc.base}
    assert bases & wanted, "the fine-tune must be stored as deltas on the base's chunks"

    dst = Repository.init(tmp_path / "dst")
    backend = SlowBases(remote, bases)
    report = Transfer()
    fetch_chunks(dst.store, backend, sorted(wanted), report, Bar())
    assert all(dst.store.has(c) for c in wanted)
    twice = {k: n for k, n in backend.gets.items() if n > 1}
    assert twice == {}, f"asked more than once: {twice}"
    assert report.chunks == len(wanted)
    src.close()
    dst.close()
