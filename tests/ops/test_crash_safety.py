"""Crash, race and full-disk defects of issue 12 (items 2, 16-19, 32): interrupted and killed
checkouts and merges, stale git lock files, lost updates, ENOSPC/EFBIG."""

from __future__ import annotations

import errno
import os
import resource
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers.models import LlamaSpec, commit_model, llama_state_dict, touch_later, tree_hashes, write_model
from helpers.run import run_mgit

import mgit.ops.recover
import mgit.ops.workfiles
from mgit import Repository
from mgit.cli import _os_error_message
from mgit.context import Context
from mgit.errors import DirtyWorktreeError, MgitError, RefUpdateError
from mgit.parallel import make_pool, ordered_map
from mgit.worktree import journal

TINY = LlamaSpec(layers=1, hidden=16, intermediate=32, vocab=32)


def _two_branches(repo: Repository) -> tuple[dict, dict]:
    """main holds v1, branch b holds v2 (both sharded in two); HEAD on main. Returns the
    working tree's hashes of each."""
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1", shards=2)
    v1 = tree_hashes(repo.root)
    repo.checkout(create_branch="b")
    commit_model(repo, llama_state_dict(TINY, seed=2), "v2", shards=2)
    v2 = tree_hashes(repo.root)
    repo.checkout("main")
    return v1, v2


def _pid_of_a_killed_holder(repo: Repository) -> None:
    """What a SIGKILLed lock holder leaves in .mgit/lock: its pid (the flock itself is gone)."""
    (repo.git_dir / "lock").write_text("999999\n")


# -- item 2 / 17: interrupted and killed checkouts and merges ---------------------------------


@pytest.mark.parametrize("point", ["rename:1", "rename:3", "rename:5"])
def test_ctrl_c_during_checkout_exits_130_and_the_rerun_finishes_it(repo: Repository, point: str) -> None:
    v1, v2 = _two_branches(repo)
    repo.close()
    env = {"MGIT_CRASH_AT": point, "MGIT_CRASH_SIGNAL": "INT"}
    interrupted = run_mgit("checkout", "b", cwd=repo.root, env=env)
    assert interrupted.returncode == 130, interrupted.stderr
    assert "Traceback" not in interrupted.stderr
    rerun = run_mgit("checkout", "b", cwd=repo.root)
    assert rerun.returncode == 0, rerun.stderr
    assert tree_hashes(repo.root) == v2
    with Repository(repo.root) as again:
        assert again.refs.current_branch() == "b"
        st = again.status()
        assert not (st.staged or st.unstaged or st.untracked)
    assert not journal.exists(repo.git_dir)


def test_ctrl_c_exits_130_for_other_commands_too(repo: Repository) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    write_model(repo.root / "model", llama_state_dict(TINY, seed=2))
    repo.close()
    got = run_mgit("add", "model", cwd=repo.root, env={"MGIT_CRASH_AT": "fsync:1", "MGIT_CRASH_SIGNAL": "INT"})
    assert got.returncode == 130, got.stderr
    assert run_mgit("add", "model", cwd=repo.root).returncode == 0


def test_killed_checkout_is_finished_by_any_next_command(repo: Repository) -> None:
    """SIGKILL after the first shard was renamed into place: status (any command taking the
    lock) finishes the checkout, saying so; nothing needs --force."""
    v1, v2 = _two_branches(repo)
    repo.close()
    killed = run_mgit("checkout", "b", cwd=repo.root, env={"MGIT_CRASH_AT": "rename:3"})
    assert killed.returncode == -9
    assert journal.exists(repo.git_dir)
    assert tree_hashes(repo.root) not in (v1, v2)  # a mix of the two revisions
    status = run_mgit("status", cwd=repo.root)
    assert status.returncode == 0
    assert "finishing the interrupted checkout of b" in status.stderr
    assert tree_hashes(repo.root) == v2
    assert "On branch b" in run_mgit("status", cwd=repo.root).stdout
    assert not journal.exists(repo.git_dir)


def test_a_checkout_refused_before_writing_leaves_no_journal(repo: Repository) -> None:
    _two_branches(repo)
    write_model(repo.root / "model", llama_state_dict(TINY, seed=3), shards=2)  # uncommitted changes
    with pytest.raises(DirtyWorktreeError):
        repo.checkout("b")
    assert not journal.exists(repo.git_dir)


def test_an_interrupted_checkout_that_cannot_be_finished_is_named(repo: Repository, monkeypatch, capsys) -> None:
    v1, v2 = _two_branches(repo)
    repo.close()
    assert run_mgit("checkout", "b", cwd=repo.root, env={"MGIT_CRASH_AT": "rename:3"}).returncode == -9

    def broken(ctx, plan):
        raise MgitError("chunk abc is missing from the store")

    monkeypatch.setattr(mgit.ops.recover, "finish", broken)
    with Repository(repo.root) as again, pytest.raises(DirtyWorktreeError) as caught:
        again.checkout("b")
    assert "interrupted checkout of b" in str(caught.value)
    assert "mgit checkout --force" in str(caught.value)
    assert "run `mgit checkout --force b` to finish it" in str(caught.value)  # the branch, not a detached id
    assert "run `mgit checkout --force b` to finish it" in capsys.readouterr().err
    monkeypatch.undo()
    with Repository(repo.root) as again:
        again.checkout("b")
    assert tree_hashes(repo.root) == v2


def test_killed_merge_after_its_result_reached_the_working_tree(tmp_path: Path) -> None:
    """SIGKILL after the merged model was installed and HEAD moved, before the index was
    saved: the next command finishes it; status is clean on the merge commit."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
    try:
        import crash_points
    finally:
        sys.path.pop(0)
    scenario = next(s for s in crash_points.SCENARIOS if s.name == "merge")
    kinds = crash_points.count_points(scenario, tmp_path)
    # the last points: index saved (rename), journal cleared, lock released
    assert kinds[-3:] == ["rename", "rename", "unlock"]
    root = tmp_path / "trial" / "repo"
    root.mkdir(parents=True)
    scenario.setup(root)
    rc = crash_points.run_cli(scenario.args, root, {"MGIT_CRASH_AT": f"any:{len(kinds) - 2}"}, tmp_path / "log")
    assert rc == -9
    assert journal.exists(root / ".mgit")
    with Repository(root) as repo:
        st = repo.status()
        assert not (st.staged or st.unstaged or st.untracked)
        assert repo.graph.commit(repo.refs.head()).summary == "m"
        assert repo.fsck() == []
    assert not journal.exists(root / ".mgit")


# -- item 16: stale git lock files ---------------------------------------------------------------


def test_stale_git_locks_left_by_a_kill_are_removed_by_the_next_command(repo: Repository) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    git = repo.git_dir
    stale = [git / "HEAD.lock", git / "refs" / "heads" / "main.lock", git / "refs" / "remotes" / "origin" / "main.lock"]
    obj_dir = next(p for p in (git / "objects").iterdir() if len(p.name) == 2)
    stale.append(obj_dir / (next(obj_dir.iterdir()).name + ".lock"))
    for p in stale:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"")
    _pid_of_a_killed_holder(repo)
    repo.close()
    write_model(repo.root / "model", llama_state_dict(TINY, seed=2))
    got = run_mgit("add", "model", cwd=repo.root)
    assert got.returncode == 0, got.stderr
    assert "removed stale lock file" in got.stderr
    committed = run_mgit("commit", "-m", "v2", cwd=repo.root)
    assert committed.returncode == 0, committed.stderr
    assert not any(p.exists() for p in stale)


def test_fsck_removes_stale_git_locks_with_a_note_and_gc_too(repo: Repository) -> None:
    """A stale lock removed is not damage: fsck says it removed it (stderr) and exits 0."""
    from helpers.cli import invoke

    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    ref_lock = repo.git_dir / "refs" / "heads" / "main.lock"
    obj_dir = next(p for p in (repo.git_dir / "objects").iterdir() if len(p.name) == 2)
    obj_lock = obj_dir / "0123.lock"  # among the objects: only looked at after a kill, or by gc and fsck
    for lock in (ref_lock, obj_lock):
        lock.write_bytes(b"")
    got = invoke("fsck", cwd=repo.root)
    assert got.returncode == 0, got.stdout + got.stderr
    assert got.stdout.strip() == "ok: every object and chunk verified"
    notes = got.stderr.strip().splitlines()
    assert len(notes) == 2 and all("removed stale lock file" in n for n in notes)
    assert "main.lock" in got.stderr and "0123.lock" in got.stderr
    assert not ref_lock.exists() and not obj_lock.exists()
    assert repo.fsck() == []
    obj_lock.write_bytes(b"")
    with repo.lock:
        assert obj_lock.exists()  # a clean previous release: the cheap places only
    repo.gc()
    assert not obj_lock.exists()


# -- item 18: a merge planned from a HEAD that moved ------------------------------------------


def test_merge_refuses_a_head_that_moved_while_it_planned(repo: Repository, monkeypatch) -> None:
    base = llama_state_dict(TINY, seed=1)
    commit_model(repo, base, "base")
    for name, seed in (("e1", 2), ("e2", 3)):
        repo.checkout(create_branch=name)
        commit_model(repo, llama_state_dict(TINY, seed=seed), name)
        repo.checkout("main")
    writing = Context.writing
    after_other: dict = {}

    def race_then_lock(self):
        """The merge planned; before it gets the lock, another process commits."""
        if not after_other:
            after_other["raced"] = True
            with Repository(self.root) as other:
                commit_model(other, llama_state_dict(TINY, seed=4), "moved")
            after_other["tree"] = tree_hashes(self.root)
            after_other["index"] = (self.git_dir / "mgit-index.json").read_bytes()
        return writing(self)

    monkeypatch.setattr(Context, "writing", race_then_lock)
    with pytest.raises(RefUpdateError) as caught:
        repo.merge(["e1", "e2"], "linear", weight=[0.5, 0.5])
    assert tree_hashes(repo.root) == after_other["tree"]  # nothing written: neither tree nor index
    assert (repo.git_dir / "mgit-index.json").read_bytes() == after_other["index"]
    assert "HEAD moved" in str(caught.value) and "run it again" in str(caught.value)
    assert repo.graph.commit(repo.refs.head()).summary == "moved"


# -- item 19: status's stat-cache refresh ------------------------------------------------------


def test_status_does_not_undo_an_add_that_ran_meanwhile(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    write_model(repo.root / "model", llama_state_dict(TINY, seed=2))
    config = repo.root / "model" / "config.json"
    touch_later(config)  # same bytes, new mtime: status refreshes its cached stat
    import mgit.ops.inspect

    changes = mgit.ops.inspect.worktree_changes

    def racing(*args, **kwargs):
        got = changes(*args, **kwargs)
        with Repository(repo.root) as other:  # `mgit add` in another process, meanwhile
            other.add(["model/model.safetensors"])
        return got

    monkeypatch.setattr(mgit.ops.inspect, "worktree_changes", racing)
    repo.status()
    monkeypatch.undo()
    with Repository(repo.root) as again:
        staged = again.status().staged
    assert [f.path for f in staged] == ["model/model.safetensors"]


# -- item 32: a full disk, a file-size limit -----------------------------------------------------


def _enospc(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_full_disk_does_not_fail_fsck_or_status_for_the_lock_pid(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    touch_later(repo.root / "model" / "config.json")  # status will refresh its cache
    monkeypatch.setattr(os, "pwrite", _enospc)
    assert repo.fsck() == []
    st = repo.status()
    assert not (st.staged or st.unstaged)


def test_checkout_on_a_full_disk_says_so_naming_the_file(repo: Repository, monkeypatch) -> None:
    v1, v2 = _two_branches(repo)
    real = os.pwrite
    calls = {"n": 0}

    def filling(fd, data, offset):
        calls["n"] += 1
        if calls["n"] == 1:  # the disk fills up during this write: a short count, then ENOSPC
            return real(fd, bytes(data)[: len(data) // 2], offset)
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "pwrite", filling)
    with pytest.raises(OSError) as caught:
        repo.checkout("b")
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    message = _os_error_message(caught.value)
    assert message.startswith("no space left on device: ")
    assert ".safetensors" in message and "short write" not in message
    assert not [p for p in (repo.root / "model").iterdir() if ".mgit-tmp-" in p.name]
    with Repository(repo.root) as again:  # space freed: the next command finishes the checkout
        again.checkout("b")
    assert tree_hashes(repo.root) == v2


def _limit_file_size(limit: int):
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_add_over_a_file_size_limit_leaves_no_pack(repo: Repository) -> None:
    """EFBIG (RLIMIT_FSIZE; Python ignores SIGXFSZ): one line naming the pack, and no
    orphaned pack or temporary file in the store."""
    import torch

    write_model(repo.root / "model", {"w": torch.randn(512, 512)})  # 1 MiB, incompressible
    repo.close()
    env = {**os.environ}
    proc = subprocess.run(
        [sys.executable, "-m", "mgit", "add", "model"],
        cwd=repo.root,
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        preexec_fn=_limit_file_size(256 * 1024),
    )
    assert proc.returncode == 1, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: file too large: ") and ".pack" in lines[0], lines
    packs = repo.git_dir / "chunks" / "packs"
    assert not list(packs.iterdir()) if packs.is_dir() else True
    assert run_mgit("status", cwd=repo.root).returncode == 0


# -- item 2: interrupts while workers run --------------------------------------------------------


def test_ordered_map_lets_running_workers_finish_before_an_error_leaves(tmp_path: Path) -> None:
    """A failure (or Ctrl-C) in the consumer must not leave workers writing to files the
    caller closes next; their descriptors could be reused by the next open."""
    pool = make_pool()
    running, finished = threading.Event(), []

    def slow(i: int) -> int:
        running.set()
        time.sleep(0.3)
        finished.append(i)
        return i

    try:
        with pytest.raises(KeyboardInterrupt):
            for _ in ordered_map(pool, slow, range(4), window=4):
                raise KeyboardInterrupt
        started = len(finished)
        time.sleep(0.5)
        assert len(finished) == started  # nothing was still running after the error left
    finally:
        pool.shutdown()


def _objects_on_a_full_disk(monkeypatch, git_dir: Path) -> None:
    """Every file opened for writing under ``git_dir/objects`` is created, but what is written
    to it goes to /dev/full (ENOSPC), as on a disk that filled up after ``add``."""
    real = os.open
    objects = str(git_dir / "objects")

    def opening(path, flags, *args, **kwargs):
        fd = real(path, flags, *args, **kwargs)
        if os.fsdecode(path).startswith(objects) and flags & (os.O_WRONLY | os.O_RDWR):
            os.close(fd)
            return real("/dev/full", os.O_WRONLY)
        return fd

    monkeypatch.setattr(os, "open", opening)


def test_commit_on_a_full_disk_says_so_in_one_line_and_leaves_no_lock(repo: Repository, monkeypatch) -> None:
    """The commit's objects cannot be written: one line (no traceback, not even the one a
    lock file's cleanup used to print when garbage-collected), no ``.lock`` left among the
    objects, HEAD unchanged; with space again the commit goes through."""
    import gc

    from helpers.cli import invoke

    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    write_model(repo.root / "model", llama_state_dict(TINY, seed=2))
    repo.add(["model"])
    head, root = repo.refs.head(), repo.root
    repo.close()
    unraisable: list[object] = []
    monkeypatch.setattr(sys, "unraisablehook", unraisable.append)
    _objects_on_a_full_disk(monkeypatch, root / ".mgit")
    got = invoke("commit", "-m", "v2", cwd=root)
    gc.collect()  # a leaked lock file's __del__ would report its error now
    monkeypatch.undo()
    lines = got.stderr.strip().splitlines()
    assert got.returncode == 1 and len(lines) == 1, got.stderr
    assert lines[0].startswith("error: no space left on device: ") and "free some space" in lines[0]
    assert unraisable == []
    assert list((root / ".mgit" / "objects").rglob("*.lock")) == []
    with Repository(root) as again:
        assert again.refs.head() == head
        again.commit("v2")
        assert again.fsck() == []


def test_a_full_disk_while_committing_names_where_and_changes_nothing(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    write_model(repo.root / "model", llama_state_dict(TINY, seed=2))
    repo.add(["model"])
    head, index = repo.refs.head(), (repo.git_dir / "mgit-index.json").read_bytes()
    _objects_on_a_full_disk(monkeypatch, repo.git_dir)
    with pytest.raises(OSError) as caught:
        repo.commit("v2")
    monkeypatch.undo()
    assert caught.value.errno == errno.ENOSPC
    assert str(repo.git_dir / "objects") in _os_error_message(caught.value)
    assert repo.refs.head() == head
    assert (repo.git_dir / "mgit-index.json").read_bytes() == index


def test_a_full_disk_while_saving_the_index_leaves_no_temporary(repo: Repository, monkeypatch) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    write_model(repo.root / "model", llama_state_dict(TINY, seed=2))
    real = os.replace

    def full(src, dst, *args, **kwargs):
        if str(dst).endswith("mgit-index.json"):
            _enospc()
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", full)
    with pytest.raises(OSError) as caught:
        repo.add(["model"])
    monkeypatch.undo()
    assert caught.value.filename == str(repo.git_dir / "mgit-index.json")
    assert not (repo.git_dir / "mgit-index.json.tmp").exists()
    assert not [p for p in (repo.git_dir / "chunks" / "packs").iterdir() if not p.with_suffix(".idx").exists()]


def _killed_in_child(fn) -> int:
    """Run ``fn`` in a forked child whose ``mgit.ops.workfiles.complete`` (what follows a journaled
    operation's file writes: index, HEAD) SIGKILLs it; the child's wait status."""
    import signal
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            mgit.ops.workfiles.complete = lambda *a, **k: os.kill(os.getpid(), signal.SIGKILL)
            fn()
        finally:
            os._exit(3)
    _, status = os.waitpid(pid, 0)
    return -os.WTERMSIG(status) if os.WIFSIGNALED(status) else os.WEXITSTATUS(status)


def test_commit_state_dict_killed_after_writing_the_working_files(repo: Repository) -> None:
    """Killed between rewriting the checked-out model and moving the branch: the next command
    finishes it (index and branch), so status is clean and the checkpoint is HEAD."""
    commit_model(repo, llama_state_dict(TINY, seed=1), "v1")
    new = llama_state_dict(TINY, seed=5)
    root = repo.root
    repo.close()

    def checkpoint() -> None:
        with Repository(root) as r:
            r.commit_state_dict(new, model="model", message="step 5")

    assert _killed_in_child(checkpoint) == -9
    assert journal.exists(root / ".mgit")
    with Repository(root) as again:
        st = again.status()
        assert not (st.staged or st.unstaged or st.untracked)
        assert again.graph.commit(again.refs.head()).summary == "step 5"
        got = again.state_dict("HEAD", names=["lm_head.weight"])
    assert bool((got["lm_head.weight"] == new["lm_head.weight"]).all())
    assert not journal.exists(root / ".mgit")
