"""Review findings on issue 12's fixes: recovery hints, gc roots, unreadable directories,
the pager, commit_state_dict, merge -b recovery, push checks, branch clashes, durable writes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.models import LlamaSpec, commit_model, llama_state_dict, tree_hashes
from helpers.run import run_mgit

import mgit.ops.checkout
import mgit.ops.recover
import mgit.ops.workfiles
from mgit import Repository
from mgit.errors import BadInputError, MgitError
from mgit.ops.workfiles import finish_command as _finish_command
from mgit.ops.workfiles import undo_command as _undo_command
from mgit.remote.backend import BadRefError, object_key
from mgit.remote.local import DirectoryBackend
from mgit.worktree import journal, scan
from mgit.worktree.journal import Journal

TINY = LlamaSpec(layers=1, hidden=16, intermediate=32, vocab=32)


def _two_branches(repo: Repository) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    repo.checkout(create_branch="b")
    commit_model(repo, llama_state_dict(TINY, seed=2), "v2", shards=2)
    repo.checkout("main")


# -- item 1: recovery hints leave HEAD where the operation would --------------------------------


@pytest.mark.parametrize(
    ("head", "finish", "undo"),
    [
        ("branch", "mgit checkout --force b", "mgit checkout --force 222222222222"),
        ("create", "mgit checkout --force b", "mgit checkout --force 222222222222"),
        ("advance", "mgit reset --hard 111111111111", "mgit reset --hard 222222222222"),
        ("detach", "mgit checkout --force 111111111111", "mgit checkout --force 222222222222"),
    ],
)
def test_the_recovery_hint_follows_how_head_moves(head: str, finish: str, undo: str) -> None:
    plan = Journal("checkout", "b", "1" * 40, head=head, branch="b", old_head="2" * 40)
    assert _finish_command(plan) == finish
    assert _undo_command(plan) == undo


# -- item 2: gc keeps the commit an interrupted operation's journal names -----------------------


def test_gc_keeps_a_checkpoint_whose_recovery_failed(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")

    def killed(ctx, plan, index, result):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(mgit.ops.workfiles, "complete", killed)
    with pytest.raises(OSError):
        repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="checkpoint")
    plan = journal.load(repo.git_dir)
    assert plan is not None and plan.head == "advance"
    monkeypatch.undo()

    def broken(ctx, plan):
        raise MgitError("disk still full")

    monkeypatch.setattr(mgit.ops.recover, "finish", broken)
    repo.gc(grace_seconds=0)
    assert repo.graph.has(plan.target)
    assert repo.graph.has(repo.graph.read(plan.target).tree.decode())


# -- item 3: an unreadable untracked directory is skipped with a warning ------------------------


def _unlistable(monkeypatch, directory: Path) -> None:
    real = os.listdir

    def listdir(path):
        if Path(path) == directory:
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(scan.os, "listdir", listdir)


def test_an_unreadable_untracked_directory_is_skipped_with_a_warning(repo: Repository, monkeypatch, capsys) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    (repo.root / "lost+found").mkdir()
    (repo.root / "lost+found" / "x").write_text("x")
    _unlistable(monkeypatch, repo.root / "lost+found")
    st = repo.status()
    assert not st.unstaged and not st.untracked
    repo.diff()
    repo.add(["."])
    assert not any(p.startswith("lost+found") for p in repo._index().entries)
    err = capsys.readouterr().err
    assert "warning: cannot read lost+found: Permission denied; skipped" in err
    assert all(line.startswith("warning: ") for line in err.splitlines())


def test_an_unreadable_tracked_directory_is_still_an_error(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    _unlistable(monkeypatch, repo.root / "model")
    with pytest.raises(BadInputError, match="cannot read model: Permission denied"):
        repo.status()
    with pytest.raises(BadInputError, match="cannot read model"):
        repo.add(["."])


def test_an_unreadable_directory_named_to_add_is_an_error(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    (repo.root / "cache").mkdir()
    _unlistable(monkeypatch, repo.root / "cache")
    with pytest.raises(BadInputError, match="cannot read cache"):
        repo.add(["cache"])


# -- item 4: a pager that does not exist prints directly ----------------------------------------


def test_a_missing_pager_prints_directly(repo: Repository) -> None:
    from test_cli_ux import run_on_tty

    commit_model(repo, llama_state_dict(TINY, seed=1), "base")
    repo.close()
    for env in ({"PAGER": "nonexistent-pager-xyz"}, {"MGIT_PAGER": "LESS=R nonexistent-pager-xyz -R"}):
        rc, screen = run_on_tty(repo.root, "log", env=env)
        assert rc == 0 and "base" in screen, env


def test_pager_program_lookup() -> None:
    from mgit.pager import _runnable

    assert _runnable("cat > out.txt") and _runnable("LESS=R cat")
    assert not _runnable("nonexistent-pager-xyz -R") and not _runnable("A=1 nonexistent-pager-xyz")


# -- item 5: commit_state_dict of what the branch holds is refused ------------------------------


def test_the_same_state_dict_twice_is_nothing_to_commit(repo: Repository) -> None:
    sd = llama_state_dict(TINY, seed=1)
    commit_model(repo, sd, "v1")
    first = repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="checkpoint 1")
    with pytest.raises(MgitError, match="nothing to commit"):
        repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="checkpoint 2")
    assert repo.refs.head() == first
    repo.checkout(create_branch="side")
    repo.checkout("main")
    with pytest.raises(MgitError, match="nothing to commit"):
        repo.commit_state_dict(llama_state_dict(TINY, seed=2), message="again", branch="side")


# -- item 6: a merge -b recovery keeps its journal until the branch is checked out --------------


def test_a_merge_b_recovery_killed_before_its_switch_is_finished_later(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    repo.checkout(create_branch="side")
    merged = commit_model(repo, llama_state_dict(TINY, seed=2), "v2", shards=2)
    want = tree_hashes(repo.root)
    repo.checkout("main")
    journal.save(repo.git_dir, Journal("merge", "m", merged, head="create", branch="m", switch_after=True))
    repo.close()

    def killed(ctx, *args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(mgit.ops.checkout, "switch", killed)
    with Repository(repo.root) as again, pytest.raises(KeyboardInterrupt):
        again.status()
    assert journal.exists(repo.git_dir)
    monkeypatch.undo()
    with Repository(repo.root) as again:
        again.status()
        assert again.refs.current_branch() == "m"
    assert tree_hashes(repo.root) == want
    assert not journal.exists(repo.git_dir)


# -- item 7: a ref update reads commits and trees only, and stops at what existing refs reach ---


def _closure(repo: Repository, commit: str) -> tuple[set[str], set[str]]:
    """(tree ids, blob ids) under a commit's tree, from the local graph."""
    trees, blobs, pending = set(), set(), [repo.graph.read(commit).tree.decode()]
    while pending:
        oid = pending.pop()
        trees.add(oid)
        for e in repo.graph.read(oid).iteritems():
            if e.mode == 0o40000:
                pending.append(e.sha.decode())
            else:
                blobs.add(e.sha.decode())
    return trees, blobs


class CountingBackend(DirectoryBackend):
    """A directory remote that records the keys it was asked to read."""

    def __init__(self, root: Path):
        super().__init__(root)
        self.read_keys: list[str] = []

    def get(self, key: str) -> bytes:
        self.read_keys.append(key)
        return super().get(key)


def test_a_ref_update_reads_no_blob_and_stops_at_what_existing_refs_reach(tmp_path: Path) -> None:
    repo = Repository.init(tmp_path / "work")
    v1 = commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    repo.remote_add("origin", str(tmp_path / "remote"))
    repo.push()
    repo.checkout(create_branch="side")
    sd = llama_state_dict(TINY, seed=1)
    name = sorted(sd)[0]
    sd[name] = sd[name] + 1
    v2 = repo.commit_state_dict(sd, message="v2")
    repo.push(branch="side")
    assert DirectoryBackend(tmp_path / "remote").swap_ref("refs/heads/side", v2, None)
    (old_trees, old_blobs), (new_trees, new_blobs) = _closure(repo, v1), _closure(repo, v2)
    backend = CountingBackend(tmp_path / "remote")
    assert backend.swap_ref("refs/heads/x", None, v2)
    read = {k.rsplit("/", 1)[-1] for k in backend.read_keys}
    assert not read & (old_blobs | new_blobs)  # manifests are never inflated
    assert read & new_trees - old_trees  # the changed file's tree was read
    assert len(backend.read_keys) < len(new_trees) + len(old_trees) + 2 + len(new_blobs)
    backend.read_keys.clear()
    assert backend.swap_ref("refs/heads/x", v2, v2)  # its own old value bounds the walk
    assert not {k.rsplit("/", 1)[-1] for k in backend.read_keys} & (old_blobs | new_blobs)
    lost = sorted(new_blobs - old_blobs)[0]
    (tmp_path / "remote" / object_key(lost)).unlink()
    assert backend.swap_ref("refs/heads/x", v2, None)
    with pytest.raises(BadRefError, match=f"lacks object {lost[:12]}, which it reaches"):
        backend.swap_ref("refs/heads/y", None, v2)


# -- item 8: a working repository as a remote sizes from the store, reads checked objects -------


def test_a_working_repository_sizes_chunks_without_reading_them(repo: Repository, monkeypatch) -> None:
    from mgit.remote.backend import chunk_key
    from mgit.remote.working import WorkingRepositoryBackend

    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    backend = WorkingRepositoryBackend(repo.root)
    keys = [chunk_key(c) for c in sorted(backend.store.ids())]
    want = {k: len(backend.get(k)) for k in keys}
    monkeypatch.setattr(type(backend.store), "export", lambda *a: pytest.fail("a chunk was read to size it"))
    assert backend.sizes(keys) == want


def test_a_working_repository_refuses_an_object_that_hashes_to_another_id(repo: Repository, monkeypatch) -> None:
    from mgit.errors import CorruptObjectError
    from mgit.remote.working import WorkingRepositoryBackend

    head = commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    backend = WorkingRepositoryBackend(repo.root)
    other = backend.graph.read(backend.graph.read(head).tree.decode())
    backend.graph.objects.pack_loose_objects()  # a whole loose object is read from its file, not the lookup
    real = type(backend.graph.objects).__getitem__
    monkeypatch.setattr(
        type(backend.graph.objects), "__getitem__", lambda self, sha: other if sha == head.encode() else real(self, sha)
    )
    with pytest.raises(CorruptObjectError, match=f"object {head[:12]} is damaged"):
        backend.get(object_key(head))


def test_a_working_repository_answers_has_for_a_damaged_loose_object(repo: Repository) -> None:
    from mgit.remote.working import WorkingRepositoryBackend

    head = commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    loose = repo.git_dir / "objects" / head[:2] / head[2:]
    assert loose.is_file()
    loose.chmod(0o644)
    loose.write_bytes(b"not zlib at all")
    backend = WorkingRepositoryBackend(repo.root)
    assert backend.has([object_key(head)]) == {object_key(head)}


# -- item 9: one constant for the chunk size ---------------------------------------------------


def test_chunks_are_cut_at_the_size_the_codec_allows() -> None:
    from mgit.model import chunking
    from mgit.store import codec

    assert chunking.DEFAULT_CHUNK_BYTES is codec.MAX_CHUNK_BYTES
    assert "MAX_CHUNK_BYTES" in vars(chunking)


# -- item 10: the console script honours MGIT_CRASH_AT -----------------------------------------


def test_the_console_entry_point_installs_crash_points(repo: Repository) -> None:
    _two_branches(repo)
    repo.close()
    script = "import sys; from mgit.cli import main; sys.exit(main())"  # what the `mgit` script runs
    env = {**os.environ, "MGIT_CRASH_AT": "rename:1"}
    killed = subprocess.run(
        [sys.executable, "-c", script, "checkout", "b"], cwd=repo.root, env=env, capture_output=True, timeout=120
    )
    assert killed.returncode == -9, killed.stderr
    assert run_mgit("status", cwd=repo.root).returncode == 0  # the next command finishes it


# -- item 11: a new np.errstate per call (one shared instance is thread-safe only on numpy >= 2) --


def test_data_math_enters_a_fresh_errstate_per_call(monkeypatch) -> None:
    import numpy as np

    from mgit.model import dtypes, stats

    made = []
    real = np.errstate

    def counting(**kwargs):
        made.append(kwargs)
        return real(**kwargs)

    monkeypatch.setattr(stats.np, "errstate", counting)
    raw = np.array([np.inf, -np.inf, 1.0], dtype=np.float32).tobytes()
    fp32 = dtypes.lookup("F32")
    with real(all="raise"):
        for _ in range(2):
            assert stats.to_float64(raw, fp32)[2] == 1.0
    assert len(made) == 2 and made[0] == {"invalid": "ignore", "over": "ignore"}


# -- item 12: branch and tag names that clash with an existing ref ------------------------------


@pytest.mark.parametrize(
    ("setup", "args", "message"),
    [
        (
            ["branch", "a"],
            ["branch", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["branch", "a/b"],
            ["branch", "a"],
            "cannot create refs/heads/a: it clashes with the existing ref refs/heads/a/b",
        ),
        (
            ["branch", "a"],
            ["branch", "-f", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["branch", "a"],
            ["branch", "-m", "a", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["branch", "x"],
            ["branch", "-m", "x", "main/y"],
            "cannot create refs/heads/main/y: it clashes with the existing ref refs/heads/main",
        ),
        (
            ["branch", "a"],
            ["checkout", "-b", "a/b"],
            "cannot create refs/heads/a/b: it clashes with the existing ref refs/heads/a",
        ),
        (
            ["tag", "v1"],
            ["tag", "v1/rc"],
            "cannot create refs/tags/v1/rc: it clashes with the existing ref refs/tags/v1",
        ),
    ],
)
def test_a_ref_name_clash_is_one_line(repo: Repository, setup: list[str], args: list[str], message: str) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    repo.close()
    assert invoke(*setup, cwd=repo.root).returncode == 0
    refs_before = sorted(p.relative_to(repo.git_dir).as_posix() for p in (repo.git_dir / "refs").rglob("*"))
    proc = invoke(*args, cwd=repo.root)
    assert proc.returncode == 2 and proc.stderr == f"error: {message}\n", proc.stderr
    assert sorted(p.relative_to(repo.git_dir).as_posix() for p in (repo.git_dir / "refs").rglob("*")) == refs_before


# -- item 15: repair's writes are durable and leave no temporary file on error ------------------


def test_atomic_write_fsyncs_and_leaves_nothing_on_error(tmp_path: Path, monkeypatch) -> None:
    from mgit import durable

    synced = []
    real_fsync = os.fsync
    monkeypatch.setattr(durable.os, "fsync", lambda fd: synced.append(fd) or real_fsync(fd))
    durable.atomic_write(tmp_path / "d" / "f", b"one")
    assert (tmp_path / "d" / "f").read_bytes() == b"one" and len(synced) == 2  # the file, then its directory

    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "replace", full)
    with pytest.raises(OSError):
        durable.atomic_write(tmp_path / "d" / "f", b"two")
    assert sorted(p.name for p in (tmp_path / "d").iterdir()) == ["f"]
    assert (tmp_path / "d" / "f").read_bytes() == b"one"


@pytest.mark.parametrize("writer", ["ref", "packed-refs", "reflog", "loose"])
def test_repair_writes_leave_no_temporary_file_on_error(repo: Repository, monkeypatch, writer: str) -> None:
    from mgit import durable
    from mgit.maintenance import repair

    head = commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    (repo.git_dir / "packed-refs").write_bytes(b"# pack-refs with: peeled\nnot a line\n")
    log = repo.git_dir / "logs" / "refs" / "heads" / "main"
    log.write_bytes(log.read_bytes() + b"garbage line\n")
    before = {p: p.read_bytes() for p in repo.git_dir.rglob("*") if p.is_file() and "chunks" not in p.parts}

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(durable.os, "fsync", full)
    with pytest.raises(OSError):
        if writer == "ref":
            repair._write_ref(repo.git_dir, "refs/heads/x", head, b"A <a@b>", "test")
        elif writer == "packed-refs":
            repair._rewrite_packed_refs(repo.git_dir)
        elif writer == "reflog":
            repair._clean_reflogs(repo.graph)
        else:
            repair.write_loose(repo.graph, repo.graph.read(head))
    after = {p for p in repo.git_dir.rglob("*") if p.is_file() and "chunks" not in p.parts}
    assert after == set(before), sorted(str(p) for p in after ^ set(before))
