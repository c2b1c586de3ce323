"""`du --json`'s chunks_by_encoding does not depend on the order the packs are listed in
(pack names are random, so before it changed from run to run)."""

from __future__ import annotations

import json

from helpers.models import commit_model, frozen_finetune, llama_state_dict

from mgit import Repository
from mgit.maintenance.du import measure_store


def test_by_encoding_is_the_same_whatever_the_pack_order(tmp_path, monkeypatch):
    repo = Repository.init(tmp_path / "r")
    base = llama_state_dict()
    commit_model(repo, base, "base")
    commit_model(repo, frozen_finetune(base, {0}), "fine-tune")  # a second pack, with deltas
    store = repo.store
    packs = list(store.indexes())
    assert len(packs) >= 2
    seen = set()
    for order in (packs, packs[::-1]):
        monkeypatch.setattr(store, "indexes", lambda order=order: iter(order))
        usage = measure_store(store)
        assert len(usage.by_encoding) >= 2
        seen.add(json.dumps(usage.by_encoding))
    assert len(seen) == 1, seen
    repo.close()
