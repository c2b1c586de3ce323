"""Opted in (``merge.inPlace = true``), a checked-out merge that changes a small part of a file
patches the working file in place (writing only the merged chunks) instead of writing the
whole file anew; the bytes are those a fresh checkout writes, and a patch killed half way is
finished by the next command. By default the merged file is renamed into place."""

from __future__ import annotations

import errno
import os
import shutil

import pytest
from helpers.models import THREE_EXPERTS, THREE_WEIGHTS, commit_model, commit_uneven, llama_state_dict, sha256
from helpers.run import run_mgit

from mgit.errors import BadInputError
from mgit.model import placing
from mgit.model.materialize import StagedFile
from mgit.model.placing import coalesced, copy_range
from mgit.repo import Repository

NAMES, WEIGHTS = THREE_EXPERTS, THREE_WEIGHTS
MODEL = "model/model.safetensors"


@pytest.fixture
def installs(monkeypatch):
    """Every staged file prepared for installing: whether it was to be patched in place."""
    seen: list[bool] = []
    real = StagedFile.prepare

    def prepare(self, pool, clean):
        pending = real(self, pool, clean)
        seen.append(isinstance(pending, placing.Patch))
        return pending

    monkeypatch.setattr(StagedFile, "prepare", prepare)
    return seen


@pytest.fixture
def in_place(three_uneven):
    """``three_uneven``, opted in to patching working files in place."""
    three_uneven.config_set("merge.inPlace", "true")
    return three_uneven


def _fresh_checkout_sha(repo) -> str:
    """The merged file as a checkout from the store writes it."""
    shutil.rmtree(repo.root / "model")
    repo.checkout("HEAD", force=True)
    return sha256(repo.root / MODEL)


@pytest.mark.parametrize("branch", [None, "m"])
def test_a_budgeted_merge_patches_the_working_file_in_place(in_place, installs, branch):
    repo = in_place
    inode = os.stat(repo.root / MODEL).st_ino
    repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS, branch=branch)
    assert installs == [True]
    assert os.stat(repo.root / MODEL).st_ino == inode  # the same file, patched
    assert list((repo.root / ".mgit" / "staging").glob("*")) == []  # the staged copy is gone
    assert repo.status().clean
    patched = sha256(repo.root / MODEL)
    assert _fresh_checkout_sha(repo) == patched


def test_an_exact_merge_replaces_the_file(three_uneven, installs):
    """Merged chunks make most of the file: writing it anew costs less than patching."""
    repo = three_uneven
    inode = os.stat(repo.root / MODEL).st_ino
    repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS)
    assert installs == [False]
    assert os.stat(repo.root / MODEL).st_ino != inode
    patched = sha256(repo.root / MODEL)
    assert _fresh_checkout_sha(repo) == patched


def test_a_merged_file_is_not_renamed_over_the_working_file(three_uneven, installs, renames):
    """The staged file goes into place once the old working file is gone: a rename over it makes
    ext4 write the merged data out at once, and the merge's HEAD update waited ~2 s for 2.2 GB."""
    repo = three_uneven
    repo.merge(list(NAMES), "task_arithmetic", weight=WEIGHTS)
    over = [existed for dst, existed in renames if dst == str(repo.root / MODEL)]
    assert installs == [False] and over == [False]
    assert repo.status().clean
    assert _fresh_checkout_sha(repo) == sha256(repo.root / MODEL)


@pytest.mark.parametrize("setting", [None, "false"])
def test_without_in_place_a_merge_replaces_the_file(three_uneven, installs, setting):
    """The default (no setting) and ``false``: the merged file is renamed into place."""
    repo = three_uneven
    if setting is not None:
        repo.config_set("merge.inPlace", setting)
    inode = os.stat(repo.root / MODEL).st_ino
    repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    assert installs == [False]
    assert os.stat(repo.root / MODEL).st_ino != inode
    assert repo.status().clean


def test_a_bad_in_place_setting_is_refused_before_any_work(three_uneven):
    repo = three_uneven
    repo.config_set("merge.inPlace", "sometimes")
    head = repo.refs.head()
    with pytest.raises(BadInputError, match=r"merge\.inPlace"):
        repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    assert repo.refs.head() == head


def test_a_hard_linked_working_file_is_not_patched(in_place, installs, tmp_path):
    """Another name for the file (a copy made with `cp -l`) keeps the old bytes."""
    repo = in_place
    other = tmp_path / "elsewhere.safetensors"
    before = sha256(repo.root / MODEL)
    os.link(repo.root / MODEL, other)
    repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    assert installs == [False]
    assert sha256(other) == before
    assert sha256(repo.root / MODEL) != before


def test_a_symlinked_working_file_is_replaced_not_written_through(in_place, installs, tmp_path):
    repo = in_place
    target = tmp_path / "shared.safetensors"
    shutil.copyfile(repo.root / MODEL, target)
    before = sha256(target)
    (repo.root / MODEL).unlink()
    (repo.root / MODEL).symlink_to(target)
    repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    assert installs == [False]
    assert sha256(target) == before
    assert not (repo.root / MODEL).is_symlink()


@pytest.mark.parametrize("point", ["write:1", "write:2"])
def test_a_patch_killed_half_way_is_finished_by_the_next_command(repo, point):
    """SIGKILL before the first and the second patched range: the journal names the file,
    and the next command rewrites what the patch had not, byte for byte."""
    commit_uneven(repo, NAMES, 50)
    repo.config_set("merge.inPlace", "true")
    root = repo.root
    repo.close()
    args = ["merge", "--method", "task_arithmetic", "--weights", "0.5,0.3,0.2", "--budget", "10%", *NAMES, "-m", "m"]
    killed = run_mgit(*args, cwd=root, env={"MGIT_CRASH_AT": point})
    assert killed.returncode == -9, killed.stderr
    assert (root / ".mgit" / "journal.json").is_file()
    status = run_mgit("status", cwd=root, check=True)
    assert "finishing the interrupted merge" in status.stderr
    assert not (root / ".mgit" / "journal.json").exists()
    with Repository(root) as again:
        assert again.status().clean
        assert again.log()[0].message.startswith("m")
        patched = sha256(root / MODEL)
        assert _fresh_checkout_sha(again) == patched
    assert run_mgit("fsck", cwd=root).returncode == 0


def test_ranges_are_sorted_and_joined():
    assert coalesced([(10, 5), (0, 10), (20, 1), (15, 2)]) == [(0, 17), (20, 1)]
    assert coalesced([]) == []


def test_a_range_copies_through_memory_where_the_kernel_cannot(tmp_path, monkeypatch):
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.write_bytes(bytes(range(256)) * 64)
    dst.write_bytes(b"\0" * (256 * 64))

    def unsupported(*args):
        raise OSError(errno.EXDEV, "cross-device")

    for kernel in (os.copy_file_range, unsupported):
        monkeypatch.setattr(placing.os, "copy_file_range", kernel)
        dst.write_bytes(b"\0" * (256 * 64))
        with open(src, "rb") as s, open(dst, "r+b") as d:
            assert copy_range(s.fileno(), d.fileno(), 1000, 1000, 5000, dst) == 5000
            assert copy_range(s.fileno(), d.fileno(), 0, 8000, 100, dst) == 100  # elsewhere in the file
            assert copy_range(s.fileno(), d.fileno(), 256 * 64 - 10, 9000, 100, dst) == 10  # the source ends
        got, want = dst.read_bytes(), src.read_bytes()
        assert got[1000:6000] == want[1000:6000] and got[8000:8100] == want[:100]
        assert got[9000:9010] == want[-10:]
        assert got[:1000] == b"\0" * 1000 and got[6000:8000] == b"\0" * 2000 and got[9010:] == b"\0" * (len(got) - 9010)


HOLDER = """
import mmap, sys
with open(sys.argv[1], "rb") as f:
    view = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
    print("mapped", flush=True)
    sys.stdin.readline()
    sys.stdout.write(__import__("hashlib").sha256(view).hexdigest())
"""


def test_a_file_another_process_has_mapped_is_replaced_not_patched(in_place, installs):
    """A process reading the old model through mmap keeps seeing it whole."""
    import subprocess
    import sys

    repo = in_place
    before = sha256(repo.root / MODEL)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(repo.root / MODEL)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout.readline().strip() == "mapped"
        repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
        seen, _ = holder.communicate("\n", timeout=60)
    finally:
        holder.kill()
    assert installs == [False]
    assert seen == before  # the old bytes, unchanged under the reader
    assert sha256(repo.root / MODEL) != before


def test_held_elsewhere_reads_maps_and_open_files(tmp_path):
    import subprocess
    import sys

    from mgit.inuse import held_elsewhere

    path = tmp_path / "f.bin"
    path.write_bytes(b"x" * 8192)
    assert not held_elsewhere(os.stat(path))
    with open(path, "rb"):  # this process's own handles do not count
        assert not held_elsewhere(os.stat(path))
    code = "import sys; f = open(sys.argv[1], 'rb'); print('open', flush=True); sys.stdin.readline()"
    other = subprocess.Popen([sys.executable, "-c", code, str(path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert other.stdout.readline().strip() == b"open"
        assert held_elsewhere(os.stat(path))
    finally:
        other.kill()
        other.wait()
    assert held_elsewhere(os.stat(path), proc=str(tmp_path / "no-proc"))  # cannot tell: held


def test_a_working_file_edited_during_the_merge_is_replaced_not_patched(in_place, monkeypatch):
    """The merge checked the tree was clean when it started; an edit of the working file while
    it ran (its own inode, in a chunk the patch leaves alone) must not end up mixed with the
    merged chunks and recorded clean: the file is replaced by the merge's result."""
    repo = in_place
    real = StagedFile.prepare
    patched: list[bool] = []

    def edited_meanwhile(self, *args):
        kept = next(c for c in self.carried if self.source.local.get(c[1], (-1, 0))[0] == c[0])
        with open(self.dest, "r+b") as f:
            byte = os.pread(f.fileno(), 1, kept[0])
            os.pwrite(f.fileno(), bytes([byte[0] ^ 0xFF]), kept[0])
        pending = real(self, *args)
        patched.append(isinstance(pending, placing.Patch))
        return pending

    monkeypatch.setattr(StagedFile, "prepare", edited_meanwhile)
    repo.merge(list(NAMES), "task_arithmetic", budget="10%", weight=WEIGHTS)
    monkeypatch.undo()
    assert patched == [False]
    assert repo.status().clean
    merged = sha256(repo.root / MODEL)
    assert _fresh_checkout_sha(repo) == merged


@pytest.mark.parametrize("key", ["merge.inPlace", "checkout.inPlace"])
def test_a_fast_forward_follows_the_merge_setting(repo, key):
    """A fast-forward installs a merge's result: merge.inPlace decides, not checkout.inPlace."""
    base = llama_state_dict(seed=3)
    commit_model(repo, base, "base")
    repo.checkout(create_branch="small")
    name = sorted(base)[0]
    commit_model(repo, {**base, name: base[name] + 1}, "one tensor changed")
    repo.checkout("main")
    repo.config_set(key, "true")
    inode = os.stat(repo.root / MODEL).st_ino
    report = repo.merge_branch("small")
    assert report.kind == "fast-forward"
    same = os.stat(repo.root / MODEL).st_ino == inode
    assert same == (key == "merge.inPlace")  # patched in place only as merge.inPlace says
    assert repo.status().clean
    merged = sha256(repo.root / MODEL)
    assert _fresh_checkout_sha(repo) == merged
