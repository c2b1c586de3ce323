"""`checkout --budget`: refused before anything is written when the estimate (store reads,
plus fetches in a partial clone) is over it; measured reads and fetches never exceed it."""

from __future__ import annotations

import re

import pytest
from helpers.cli import invoke
from helpers.models import commit_model, frozen_finetune, llama_state_dict, tree_hashes
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import BadInputError
from mgit.model.filetree import load_safetensors
from mgit.remote.local import DirectoryBackend
from mgit.remote.transfer import chunks_of, fetch_costs

SHARD1 = "model/model-00001-of-00002.safetensors"


@pytest.fixture
def work(tmp_path):
    """main: a two-shard llama; sft: every layer fine-tuned. On main."""
    repo = Repository.init(tmp_path / "work")
    base = llama_state_dict()
    commit_model(repo, base, "base", shards=2)
    repo.checkout(create_branch="sft")
    commit_model(repo, frozen_finetune(base, set(), seed=5), "sft", shards=2)
    repo.checkout("main")
    yield repo, tmp_path
    repo.close()


def needed(repo: Repository, rev: str, **kwargs) -> int:
    """The estimate, as the refusal at a budget of 0 states it (nothing changes)."""
    with pytest.raises(BadInputError) as info:
        repo.checkout(rev, budget=0, **kwargs)
    return int(re.search(r"needs .*?\((\d+) bytes\)", str(info.value)).group(1))


def snapshot_state(repo: Repository) -> tuple:
    return (
        tree_hashes(repo.root),
        repo.refs.head(),
        repo.refs.current_branch(),
        (repo.git_dir / "mgit-index.json").read_bytes(),
        repo.store.ids(),
    )


def test_over_budget_is_refused_naming_estimate_and_budget(work):
    repo, _ = work
    before = snapshot_state(repo)
    with pytest.raises(BadInputError) as info:
        repo.checkout("sft", budget="10kB")
    message = str(info.value)
    assert "read from the chunk store" in message and "the budget is 10.0 kB (10000 bytes)" in message
    assert "--include" in message and "\n" not in message
    assert snapshot_state(repo) == before


def test_within_budget_reads_no_more_than_it(work):
    repo, _ = work
    need = needed(repo, "sft")
    with pytest.raises(BadInputError):
        repo.checkout("sft", budget=need - 1)
    res = repo.checkout("sft", budget=need)
    assert res.cost.total == need and 0 < res.bytes_read <= need
    assert repo.refs.current_branch() == "sft" and repo.status().clean
    res = repo.checkout("main", budget="1GB")  # sizes as users write them
    assert res.bytes_read <= 10**9 and res.cost.read == res.bytes_read


def test_a_sparse_checkout_prices_only_its_tensors(work):
    repo, _ = work
    full = needed(repo, "sft")
    include = {"include": ["model.layers.0.*"]}
    sparse = needed(repo, "sft", **include)
    assert 0 < sparse < full / 4
    res = repo.checkout("sft", budget=sparse, **include)
    assert res.bytes_read <= sparse and repo.status().clean


def test_a_share_is_no_checkout_budget(work):
    repo, _ = work
    with pytest.raises(BadInputError, match="not a share"):
        repo.checkout("sft", budget="10%")
    with pytest.raises(BadInputError, match="not a size"):
        repo.checkout("sft", budget="lots")


@pytest.fixture
def remote(work):
    """The work repository pushed to a directory remote, with a third branch, other, holding
    only an unrelated model elsewhere (its chunks are no delta of main's)."""
    repo, tmp = work
    repo.checkout(create_branch="other")
    repo.rm(["model"])
    commit_model(repo, llama_state_dict(seed=42), "unrelated", directory="elsewhere")
    repo.checkout("main")
    repo.remote_add("origin", str(tmp / "remote.mgit"))
    for branch in ("main", "sft", "other"):
        repo.push("origin", branch)
    return repo, tmp / "remote.mgit"


def test_partial_clone_prices_and_caps_what_it_fetches(remote, tmp_path):
    repo, url = remote
    partial = Repository.clone(str(url), tmp_path / "partial", partial=True)  # main checked out
    wanted = chunks_of(repo.graph, [repo.refs.resolve("sft")]) - partial.store.ids()
    assert fetch_costs(partial.store, DirectoryBackend(url), wanted) == {
        c: (url / "chunks" / c).stat().st_size for c in wanted
    }
    before = snapshot_state(partial)
    fetched = partial.fetched.bytes
    with pytest.raises(BadInputError) as info:
        partial.checkout("sft", budget=1000)
    assert "fetched from origin" in str(info.value)
    assert partial.fetched.bytes == fetched and snapshot_state(partial) == before  # refused before fetching

    need = needed(partial, "sft")
    res = partial.checkout("sft", budget=10 * need)
    assert res.bytes_fetched == sum((url / "chunks" / c).stat().st_size for c in wanted)  # as estimated
    assert res.bytes_read + res.bytes_fetched <= 10 * need
    assert tree_hashes(partial.root) == _full_checkout(repo, "sft")
    assert partial.status().clean and Repository(partial.root).fsck() == []


def test_a_fetch_that_outgrows_its_budget_keeps_nothing(remote, tmp_path):
    """sft's chunks are deltas of main's: a partial clone without main's chunks learns of
    those bases only as sft's arrive. The cap stops the fetch within the budget."""
    repo, url = remote
    include = {"include": ["model.layers.1.*"]}
    layer1 = [
        c.id
        for n, m in load_safetensors(repo.graph, repo.snapshot("sft")[SHARD1].oid).manifests.items()
        if n.startswith("model.layers.1.")
        for c in m.chunks
    ]
    assert any(repo.store.location(c).base for c in layer1)  # the case this test is about
    partial = Repository.clone(str(url), tmp_path / "partial", partial=True, branch="other")
    estimate = needed(partial, "sft", **include)
    before, fetched = snapshot_state(partial), partial.fetched.bytes
    with pytest.raises(BadInputError, match="are deltas, whose bases must be fetched"):
        partial.checkout("sft", budget=estimate, **include)
    assert 0 < partial.fetched.bytes - fetched <= estimate  # it fetched, then stopped within the budget
    assert snapshot_state(partial) == before  # and kept none of it
    res = partial.checkout("sft", budget="100MB", **include)
    assert res.bytes_read + res.bytes_fetched <= 100 * 10**6 and partial.status().clean


def test_cli_budget(work):
    repo, _ = work
    proc = invoke("checkout", "sft", "--budget", "1kB", cwd=repo.root)
    assert proc.returncode != 0 and proc.stderr.startswith("error: checkout needs")
    assert len(proc.stderr.strip().splitlines()) == 1 and "1.0 kB (1000 bytes)" in proc.stderr
    proc = run_mgit("checkout", "sft", "--budget", "50MB", cwd=repo.root, check=True)
    assert "budget 50MB" in proc.stderr


def _full_checkout(repo: Repository, rev: str) -> dict[str, str]:
    repo.checkout(rev)
    return tree_hashes(repo.root)


def test_deltas_of_chunks_held_here_are_priced_with_their_bases(remote, tmp_path):
    """A partial clone holding main checks out sft, whose chunks are deltas of main's: the
    estimate counts reading those bases (to verify the fetched deltas and to decode them), so a
    budget equal to it is enough, and what is measured stays within it."""
    _, url = remote
    partial = Repository.clone(str(url), tmp_path / "partial", partial=True, branch="main")
    estimate = needed(partial, "sft")
    res = partial.checkout("sft", budget=estimate)
    assert 0 < res.bytes_fetched and res.bytes_read + res.bytes_fetched <= estimate
    assert partial.status().clean
