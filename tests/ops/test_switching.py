"""`switch`, `restore` and `mv`, as git does them, from the CLI and from Python."""

from __future__ import annotations

import json
import os

import pytest
from helpers.cli import invoke
from helpers.histories import MODEL
from helpers.histories import changes as _changes
from helpers.histories import text_commit as _text_commit
from helpers.histories import tuned as _tuned
from helpers.models import small_state_dict, tree_hashes

from mgit import Repository
from mgit.errors import BadInputError

_sd = small_state_dict


# -- switch -------------------------------------------------------------------------------------


def test_switch_to_a_branch_a_new_branch_and_detached(forked):
    repo, a, b = forked
    b_files = tree_hashes(repo.root)
    invoke("switch", "side", cwd=repo.root, check=True)
    assert repo.refs.current_branch() == "side" and "notes.txt" not in tree_hashes(repo.root)
    proc = invoke("switch", "-c", "exp", "main", cwd=repo.root, check=True)
    assert "Switched to a new branch 'exp'" in proc.stderr
    assert repo.refs.current_branch() == "exp" and repo.refs.head() == b and tree_hashes(repo.root) == b_files
    doc = json.loads(invoke("switch", "--detach", "side", "--json", cwd=repo.root, check=True).stdout)
    assert doc["schema"] == "mgit.checkout/1" and doc["detached"] and doc["commit"] == a
    assert repo.refs.current_branch() is None and repo.refs.head() == a
    res = repo.switch("main")
    assert repo.refs.current_branch() == "main" and tree_hashes(repo.root) == b_files and not res.detached
    repo.switch(create="exp2", start="side")
    assert repo.branches()["exp2"] == a and repo.refs.current_branch() == "exp2"


def test_switch_refuses_a_revision_that_is_no_branch_and_changes_nothing(forked):
    repo, a, _ = forked
    before = tree_hashes(repo.root)
    for rev, message in [
        (
            a,
            f"a branch is expected, got '{a}' ({a[:12]}); to look at it without a branch, "
            f"run `mgit switch --detach {a}`",
        ),
        ("nope", "no branch 'nope'; create it with `mgit switch -c nope`"),
    ]:
        proc = invoke("switch", rev, cwd=repo.root)
        assert proc.returncode == 2 and proc.stderr.strip() == f"error: {message}"
    assert repo.refs.current_branch() == "main" and tree_hashes(repo.root) == before


def test_switch_refuses_local_changes_in_the_way_unless_forced(forked):
    repo, a, _ = forked
    (repo.root / "notes.txt").write_text("local edit\n")
    proc = invoke("switch", "side", cwd=repo.root)
    assert proc.returncode == 4 and "notes.txt" in proc.stderr
    assert (repo.root / "notes.txt").read_text() == "local edit\n"
    invoke("switch", "side", "--discard-changes", cwd=repo.root, check=True)
    assert repo.refs.head() == a and not (repo.root / "notes.txt").exists()


def test_switch_makes_the_local_branch_of_a_remotes_branch(forked, tmp_path):
    repo, _, b = forked
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    with Repository.clone(str(tmp_path / "remote.mgit"), tmp_path / "clone") as clone:
        clone.switch(create="topic")
        clone.switch("main")  # exists already: a plain switch
        repo.switch(create="feature")
        repo.push("origin", "feature")
        clone.fetch()
        clone.switch("feature")  # only origin/feature: the local branch is made from it
        assert clone.branches()["feature"] == b and clone.refs.current_branch() == "feature"


# -- restore ------------------------------------------------------------------------------------


def test_restore_brings_a_working_file_back_from_the_index(forked):
    repo, _, _ = forked
    committed = tree_hashes(repo.root)
    _tuned(repo, seed=5)
    (repo.root / "notes.txt").write_text("staged edit\n")
    repo.add(["notes.txt"])
    staged = tree_hashes(repo.root)["notes.txt"]
    (repo.root / "notes.txt").write_text("unstaged edit\n")
    invoke("restore", MODEL, "notes.txt", cwd=repo.root, check=True)
    now = tree_hashes(repo.root)
    assert now[MODEL] == committed[MODEL] and now["notes.txt"] == staged  # the index's, byte for byte
    assert _changes(repo) == ({"notes.txt": "modified"}, {})  # the staged change stays staged


def test_restore_source_writes_a_revisions_file_and_leaves_the_index(forked):
    repo, a, _ = forked
    a_model = tree_hashes(repo.root)  # b's files
    res = repo.restore([MODEL], source="side")
    assert res.written == [MODEL] and res.source == a
    assert tree_hashes(repo.root)[MODEL] != a_model[MODEL]
    assert _changes(repo) == ({}, {MODEL: "modified"})  # index untouched: the file differs from it
    invoke("restore", "--source", "side", "notes.txt", cwd=repo.root, check=True)  # side lacks it: removed
    assert not (repo.root / "notes.txt").exists()
    assert _changes(repo) == ({}, {MODEL: "modified", "notes.txt": "deleted"})


def test_restore_staged_unstages_and_staged_worktree_resets_both(forked):
    repo, _, _ = forked
    committed = tree_hashes(repo.root)
    _tuned(repo, seed=5)
    repo.add(["model"])
    changed = tree_hashes(repo.root)[MODEL]
    doc = json.loads(invoke("restore", "--staged", MODEL, "--json", cwd=repo.root, check=True).stdout)
    assert doc["schema"] == "mgit.restore/1" and doc["unstaged"] == [MODEL] and doc["written"] == []
    assert _changes(repo) == ({}, {MODEL: "modified"}) and tree_hashes(repo.root)[MODEL] == changed
    repo.add(["model"])
    invoke("restore", "-S", "-W", "--", MODEL, cwd=repo.root, check=True)
    assert tree_hashes(repo.root) == committed and repo.status().clean


def test_restore_refuses_a_path_neither_side_has(forked):
    repo, _, _ = forked
    proc = invoke("restore", "nothing.txt", cwd=repo.root)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: pathspec 'nothing.txt' did not match any file in the index"
    with pytest.raises(BadInputError, match="did not match any file in the index or side"):
        repo.restore(["nothing.txt"], source="side")


# -- mv -----------------------------------------------------------------------------------------


def test_mv_renames_a_file_and_a_directory_in_tree_and_index(forked):
    repo, _, _ = forked
    st = os.stat(repo.root / MODEL)  # the fixture dated it ahead; back in the past, the stat cache vouches for it
    os.utime(repo.root / MODEL, ns=(st.st_atime_ns, st.st_mtime_ns - 10_000_000_000))
    repo.add(["model"])
    files = tree_hashes(repo.root)
    (repo.root / "model" / "scratch.tmp").write_text("untracked, moves with its directory\n")
    invoke("mv", "notes.txt", "README.txt", cwd=repo.root, check=True)
    out = invoke("mv", "-v", "model", "llama", cwd=repo.root, check=True).stdout
    assert f"Renaming {MODEL} to llama/model.safetensors" in out
    moved = {p.replace("model/", "llama/", 1).replace("notes.txt", "README.txt"): h for p, h in files.items()}
    assert {p: h for p, h in tree_hashes(repo.root).items() if not p.endswith(".tmp")} == moved
    assert (repo.root / "llama" / "scratch.tmp").exists()
    staged, unstaged = _changes(repo)
    assert unstaged == {} and set(staged) == {*files, *moved} - (set(files) & set(moved))
    index = repo._index()
    big = index.entries["llama/model.safetensors"]
    assert big.matches(os.stat(repo.root / "llama" / "model.safetensors"))  # no re-hash after the rename
    repo.commit("renamed")
    assert _changes(repo) == ({}, {})


def test_mv_into_a_directory_and_its_refusals(forked):
    repo, _, _ = forked
    (repo.root / "docs").mkdir()
    (repo.root / "other.txt").write_text("untracked\n")
    assert repo.mv(["notes.txt"], "docs") == [("notes.txt", "docs/notes.txt")]
    for args, message in [
        (("other.txt", "x.txt"), "not under version control, source=other.txt, destination=x.txt"),
        (("model", "model/inner"), "cannot move a directory into itself, source=model, destination=model/inner"),
        (
            ("docs/notes.txt", "other.txt"),
            "destination exists (use -f to overwrite a file), source=docs/notes.txt, destination=other.txt",
        ),
        (("docs/notes.txt", "model/config.json", "x"), "destination 'x' is not a directory"),
    ]:
        before = tree_hashes(repo.root)
        proc = invoke("mv", *args, cwd=repo.root)
        assert proc.returncode == 2 and proc.stderr.strip() == f"error: {message}"
        assert tree_hashes(repo.root) == before
    invoke("mv", "-f", "docs/notes.txt", "other.txt", cwd=repo.root, check=True)
    assert (repo.root / "other.txt").read_text() == "b only\n" and "other.txt" in repo._index().entries


@pytest.fixture
def three(repo: Repository) -> tuple[Repository, list[str]]:
    return repo, [_text_commit(repo, {"f.txt": f"{n}\n"}, f"c{n}") for n in range(3)]


def test_switch_detach_without_a_revision_detaches_at_head(three):
    repo, commits = three
    proc = invoke("switch", "--detach", cwd=repo.root, check=True)
    assert "HEAD is now detached at" in proc.stderr
    assert repo.refs.current_branch() is None and repo.refs.head() == commits[-1]
    repo.switch("main")
    repo.switch(detach=True)
    assert repo.refs.current_branch() is None and repo.refs.head() == commits[-1]


# -- mv -----------------------------------------------------------------------------------------


@pytest.fixture
def tracked(repo: Repository) -> Repository:
    _text_commit(repo, {"d/f": "f\n", "d/g": "g\n", "a": "a\n"}, "files")
    (repo.root / "out").mkdir()
    return repo


def test_mv_refuses_a_source_inside_another_and_moves_nothing(tracked):
    repo = tracked
    before, index = tree_hashes(repo.root), repo._index().entries.copy()
    for args in (("d", "d/f", "out"), ("d/f", "d", "out")):
        proc = invoke("mv", *args, cwd=repo.root)
        assert proc.returncode == 2 and proc.stderr == "error: source 'd/f' is inside source 'd': name one of them\n"
        assert tree_hashes(repo.root) == before and repo._index().entries == index


def test_mv_records_the_moves_done_when_a_later_rename_fails(tracked, monkeypatch):
    repo = tracked
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        if os.fspath(dst).endswith(os.path.join("out", "d")):
            raise PermissionError(13, "Permission denied", os.fspath(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    with pytest.raises(PermissionError):
        repo.mv(["a", "d"], "out")
    monkeypatch.undo()
    entries = repo._index().entries
    assert "out/a" in entries and "a" not in entries and {"d/f", "d/g"} <= set(entries)
    assert (repo.root / "out" / "a").is_file() and (repo.root / "d" / "f").is_file()
    assert repo.status().unstaged == []  # the index says what the working tree holds


def test_mv_never_follows_a_symbolic_link_out_of_the_working_tree(tracked, tmp_path):
    repo = tracked
    outside = tmp_path / "outside"
    outside.mkdir()
    (repo.root / "link").symlink_to(outside)
    before, index = tree_hashes(repo.root), repo._index().entries.copy()
    for args, message in [
        (("a", "link"), "destination exists (use -f to overwrite a file), source=a, destination=link"),
        (("a", "link/x"), "destination directory 'link' is a symbolic link, source=a, destination=link/x"),
        (("d/f", "d/g", "link"), "destination 'link' is not a directory"),
    ]:
        proc = invoke("mv", *args, cwd=repo.root)
        assert proc.returncode == 2 and proc.stderr == f"error: {message}\n"
        assert list(outside.iterdir()) == [] and tree_hashes(repo.root) == before
        assert repo._index().entries == index
