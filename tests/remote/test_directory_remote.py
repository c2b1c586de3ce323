"""Remotes on a directory: push/clone round trips, only missing chunks travel, resumable and
race-free pushes, verification on fetch, partial clones, pull."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
import safetensors.torch
from helpers.cli import invoke
from helpers.models import commit_model, frozen_finetune, llama_state_dict, tree_hashes
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import BadInputError, CorruptObjectError, MergeConflictError, NonFastForwardError, RemoteError
from mgit.model.filetree import load_safetensors
from mgit.remote.backend import chunk_key
from mgit.remote.local import DirectoryBackend


@pytest.fixture
def pushed(tmp_path):
    """A repository with a base and a fine-tune (half the layers frozen) on main, its remote."""
    repo = Repository.init(tmp_path / "work")
    base = llama_state_dict()
    commit_model(repo, base, "base")
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    first = repo.push()
    return repo, base, first, tmp_path


def changed_chunks(repo: Repository, a: str, b: str) -> set[str]:
    def chunks(rev: str) -> set[str]:
        from mgit.remote.transfer import chunks_of

        return chunks_of(repo.graph, [repo.refs.resolve(rev)])

    return chunks(b) - chunks(a)


def test_push_then_clone_is_byte_exact(pushed):
    repo, _, first, tmp = pushed
    assert first.chunks > 0 and first.refs["refs/heads/main"][0] is None
    clone = Repository.clone(str(tmp / "remote.mgit"), tmp / "clone")
    assert tree_hashes(clone.root) == tree_hashes(repo.root)
    assert clone.refs.head() == repo.refs.head() and clone.refs.current_branch() == "main"
    assert clone.status().clean and clone.fsck() == []


def test_second_push_sends_only_the_changed_chunks(pushed):
    repo, base, _, _ = pushed
    commit_model(repo, frozen_finetune(base, frozen_layers={0, 1}, seed=4), "fine-tune")
    expected = changed_chunks(repo, "HEAD~1", "HEAD")
    report = repo.push()
    assert report.chunks == len(expected) > 0
    assert report.present_chunks > 0
    again = repo.push()
    assert again.chunks == 0 and again.objects == 0


def test_concurrent_pushes_to_one_ref_exactly_one_wins(pushed):
    repo, base, _, tmp = pushed
    other = Repository.clone(str(tmp / "remote.mgit"), tmp / "other")
    commit_model(repo, frozen_finetune(base, {0}, seed=6), "ours")
    commit_model(other, frozen_finetune(base, {1}, seed=7), "theirs")
    outcomes = []

    def go(r: Repository) -> None:
        try:
            r.push()
            outcomes.append("won")
        except NonFastForwardError as exc:
            outcomes.append(str(exc))

    threads = [threading.Thread(target=go, args=(r,)) for r in (repo, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert outcomes.count("won") == 1
    assert any("fetch" in o for o in outcomes if o != "won")
    on_remote = DirectoryBackend(tmp / "remote.mgit").refs()["refs/heads/main"]
    loser = other if on_remote == repo.refs.head() else repo
    with pytest.raises(NonFastForwardError, match="not a fast-forward"):
        loser.push()


def test_a_tampered_chunk_is_rejected_on_fetch_naming_it(pushed):
    repo, _, _, tmp = pushed
    remote = tmp / "remote.mgit"
    victim = sorted((remote / "chunks").iterdir())[0]
    data = bytearray(victim.read_bytes())
    data[-1] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(CorruptObjectError, match=victim.name[:12]):
        Repository.clone(str(remote), tmp / "clone")
    assert not (tmp / "clone").exists()


def test_a_partial_clone_fetches_only_what_checkout_needs(pushed):
    repo, base, _, tmp = pushed
    repo.checkout(create_branch="other")
    commit_model(repo, llama_state_dict(seed=42), "an unrelated model")
    repo.push("origin", "other")
    remote = tmp / "remote.mgit"
    partial = Repository.clone(str(remote), tmp / "partial", partial=True)  # checks out main
    repo.checkout("main")
    assert tree_hashes(partial.root) == tree_hashes(repo.root)
    main_chunks = changed_chunks(repo, "other~1", "main") | changed_chunks(repo, "other", "main")
    from mgit.remote.transfer import chunks_of

    needed = chunks_of(repo.graph, [repo.refs.resolve("main")])
    assert partial.store.ids() == needed and main_chunks <= needed
    assert partial.fetched.bytes == sum((remote / "chunks" / c).stat().st_size for c in needed)
    # what it has not fetched comes on demand, and stays
    other = partial.state_dict("origin/other")
    assert set(other) == set(base) and partial.store.ids() == needed | chunks_of(
        repo.graph, [repo.refs.resolve("other")]
    )
    assert Repository(partial.root).fetch(chunks="origin/other").chunks == 0


def test_fetch_chunks_fills_a_partial_clone(pushed):
    repo, _, _, tmp = pushed
    repo.checkout(create_branch="other")
    commit_model(repo, llama_state_dict(seed=43), "an unrelated model")
    repo.push("origin", "other")
    partial = Repository.clone(str(tmp / "remote.mgit"), tmp / "p", partial=True)
    assert partial.is_partial and partial.fsck() == []  # chunks not fetched yet are no problem
    assert Repository(partial.root).fetch(chunks="HEAD").chunks == 0  # checkout fetched them already
    report = Repository(partial.root).fetch(chunks="origin/other")
    assert report.chunks > 0 and Repository(partial.root).fsck() == []


def test_a_delta_is_pushed_with_its_base_when_the_remote_lacks_it(tmp_path):
    """A root commit whose chunks are deltas against chunks of a commit outside its history."""
    repo = Repository.init(tmp_path / "w")
    base = llama_state_dict()
    commit_model(repo, base, "base")
    repo.checkout(create_branch="tuned")
    commit_model(repo, frozen_finetune(base, frozen_layers=set(), seed=13), "tuned")
    tree = repo.graph.commit(repo.refs.head()).tree
    lonely = repo.graph.put_commit(tree, [], "tuned, without its history", repo.identity(), repo.identity())
    repo.refs.create_branch("lonely", lonely)
    from mgit.remote.transfer import chunks_of

    own = chunks_of(repo.graph, [lonely])
    bases = {loc.base for c in own if (loc := repo.store.location(c)) is not None and loc.base} - own
    assert bases  # deltas whose bases lie outside the pushed history
    repo.remote_add("origin", str(tmp_path / "remote"))
    report = repo.push("origin", "lonely")
    assert report.chunks == len(own | bases)
    clone = Repository.clone(str(tmp_path / "remote"), tmp_path / "c", branch="lonely")
    assert clone.fsck() == [] and tree_hashes(clone.root) == tree_hashes(repo.root)


def test_pull_fast_forwards_and_merges_diverged_history(pushed):
    """Diverged history: pull --ff-only refuses it; pull merges it three-way, and tensors both
    sides changed are conflicts (nothing merged; tests/merge/test_threeway_commands.py)."""
    repo, base, _, tmp = pushed
    other = Repository.clone(str(tmp / "remote.mgit"), tmp / "other")
    commit_model(repo, frozen_finetune(base, {0}, seed=9), "ahead")
    repo.push()
    other.pull()
    assert other.refs.head() == repo.refs.head() and tree_hashes(other.root) == tree_hashes(repo.root)
    commit_model(repo, frozen_finetune(base, {1}, seed=10), "ours")
    repo.push()
    commit_model(other, frozen_finetune(base, {2}, seed=11), "theirs")
    local = other.refs.head()
    with pytest.raises(NonFastForwardError, match="diverged"):
        other.pull(ff_only=True)
    with pytest.raises(MergeConflictError, match="nothing was committed"):
        other.pull()  # both changed layers 0 and 3
    assert other.refs.head() == local


def test_errors_are_one_clear_line(pushed, tmp_path):
    repo, _, _, tmp = pushed
    with pytest.raises(BadInputError, match="no remote named 'nope'"):
        repo.push("nope")
    full = tmp / "full"
    full.mkdir()
    (full / "x").write_text("x")
    repo.remote_add("bad", str(full))
    with pytest.raises(RemoteError, match="not empty"):
        repo.push("bad")
    with pytest.raises(RemoteError, match="not an mgit remote"):
        Repository.clone(str(full), tmp / "c")
    repo.remote_add("working", str(repo.root))
    with pytest.raises(RemoteError, match="working repository, not a remote"):
        repo.push("working")
    with pytest.raises(RemoteError, match="no branch 'zzz'"):
        Repository.clone(str(tmp / "remote.mgit"), tmp / "c", branch="zzz")
    with pytest.raises(RemoteError):
        DirectoryBackend(tmp / "remote.mgit").get("chunks/../../etc/passwd")
    assert chunk_key("a" * 64) == "chunks/" + "a" * 64


@pytest.mark.slow
def test_cli_remote_push_clone_pull(pushed):
    repo, base, _, tmp = pushed
    run_mgit("remote", "add", "mirror", str(tmp / "mirror"), cwd=repo.root, check=True)
    listed = run_mgit("remote", cwd=repo.root, check=True).stdout
    assert "mirror" in listed and "origin" in listed
    pushed_json = run_mgit("push", "mirror", "--json", cwd=repo.root, check=True).stdout
    assert '"schema": "mgit.transfer/1"' in pushed_json
    run_mgit("clone", str(tmp / "mirror"), str(tmp / "cli-clone"), cwd=tmp, check=True)
    assert tree_hashes(tmp / "cli-clone") == tree_hashes(repo.root)
    bad = run_mgit("push", "nowhere", cwd=repo.root)
    assert bad.returncode != 0 and "no remote named" in bad.stderr and "Traceback" not in bad.stderr


def test_checking_out_a_remote_branch_by_name_creates_it(pushed):
    repo, base, _, tmp = pushed
    repo.checkout(create_branch="tuned")
    commit_model(repo, frozen_finetune(base, {0}, seed=14), "tuned")
    repo.push("origin", "tuned")
    clone = Repository.clone(str(tmp / "remote.mgit"), tmp / "c")
    assert "tuned" not in clone.branches()
    clone.checkout("tuned")
    assert clone.refs.current_branch() == "tuned" and clone.refs.head() == repo.refs.head()
    assert tree_hashes(clone.root) == tree_hashes(repo.root)


def test_a_partial_clone_diffs_and_merges_fetching_on_demand(pushed):
    repo, base, _, tmp = pushed
    for name, frozen in (("math", {0, 1}), ("code", {2, 3})):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, frozen_finetune(base, frozen, seed=20 + len(name)), name)
        repo.push("origin", name)
    repo.checkout("main")
    partial = Repository.clone(str(tmp / "remote.mgit"), tmp / "p", partial=True)
    before = partial.fetched.chunks
    diff = partial.diff("origin/math", "origin/code")
    assert partial.fetched.chunks > before and diff.tensors
    ours = partial.merge(["origin/math", "origin/code"], "task_arithmetic", weight=0.5)
    theirs = repo.merge(["math", "code"], "task_arithmetic", weight=0.5, base="main", branch="m")
    assert partial.graph.commit(ours).tree != "" and dict(partial.snapshot(ours)) == dict(repo.snapshot(theirs))
    assert Repository(partial.root).fsck() == []


def test_a_sparse_partial_clone_fetches_only_the_selected_tensors(pushed):
    repo, base, _, tmp = pushed
    partial = Repository.clone(str(tmp / "remote.mgit"), tmp / "p", partial=True, include=["model.layers.0.*"])
    selected = {n for n in base if n.startswith("model.layers.0.")}
    manifests = load_safetensors(repo.graph, repo.snapshot("main")["model/model.safetensors"].oid).manifests
    wanted = {c.id for n in selected for c in manifests[n].chunks}
    assert partial.store.ids() == wanted  # nothing else came
    assert set(safetensors.torch.load_file(partial.root / "model" / "model.safetensors")) == selected
    assert partial.status().sparse is not None and partial.status().clean
    partial.checkout("main", full=True)  # the rest comes now
    assert tree_hashes(partial.root) == tree_hashes(repo.root)


def test_a_clone_over_its_budget_leaves_nothing(pushed):
    _, _, _, tmp = pushed
    proc = invoke("clone", "--partial", "--budget", "1kB", str(tmp / "remote.mgit"), "small", cwd=tmp)
    assert proc.returncode != 0 and "budget" in proc.stderr and "--include" in proc.stderr
    assert not (tmp / "small").exists()
    for args in (["--budget", "1GB"], ["--partial", "--budget", "10%"], ["--include", ""]):
        bad = invoke("clone", *args, str(tmp / "remote.mgit"), "never", cwd=tmp)  # refused before anything travels
        assert bad.returncode != 0 and "Traceback" not in bad.stderr and not (tmp / "never").exists()
    ok = invoke(
        "clone", "--partial", "--include", "lm_head.*", "--budget", "1GB", str(tmp / "remote.mgit"), "s2", cwd=tmp
    )
    assert ok.returncode == 0, ok.stderr


def _temporaries(remote) -> list[str]:
    return sorted(str(p.relative_to(remote)) for p in remote.rglob("*") if p.is_file() and ".tmp-" in p.name)


def test_the_next_push_removes_what_killed_pushes_left_after_an_hour(pushed):
    """A push killed between writing an object and renaming it into place leaves its temporary
    file in the remote; the next push (its ref update) deletes those an hour old, and leaves a
    younger one alone: it may be another push's, still being written."""
    import os
    import time

    repo, base, _, tmp_path = pushed
    remote = tmp_path / "remote.mgit"
    commit_model(repo, frozen_finetune(base, {0, 1}, seed=4), "tune")
    root = repo.root
    repo.close()
    killed = run_mgit("push", cwd=root, env={"MGIT_CRASH_AT": "rename:1"})  # the first object's rename
    assert killed.returncode == -9, killed.stderr
    left = _temporaries(remote)  # the uploads in flight (several threads) when it died
    assert left, "the killed push left no temporary file"
    hour_ago = time.time() - 3700
    for name in left:
        os.utime(remote / name, (hour_ago, hour_ago))
    young = Path(left[0]).with_name("chunk.tmp-young")
    (remote / young).write_bytes(b"a push in flight")
    run_mgit("push", cwd=root, check=True)
    assert _temporaries(remote) == [str(young)]
    with Repository.clone(str(remote), tmp_path / "clone") as clone:
        assert clone.fsck() == []


def test_a_ref_deleted_while_refs_are_listed_is_left_out(tmp_path, monkeypatch):
    """A concurrent delete between listing refs/ and reading a ref is no error (CI saw
    FileNotFoundError from ``mgit serve`` in a delete-versus-move race)."""
    import mgit.remote.local as local

    backend = DirectoryBackend(tmp_path / "remote", create=True)
    for name in ("main", "dev"):
        path = backend.root / "refs" / "heads" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("0" * 40 + "\n")
    listed = local._files

    def listing_then_deleted(top: Path):
        for path in listed(top):
            if path.name == "dev":
                path.unlink()  # what a concurrent swap_ref(..., None) does after os.walk saw it
            yield path

    monkeypatch.setattr(local, "_files", listing_then_deleted)
    assert backend.raw_refs() == {"refs/heads/main": "0" * 40}
