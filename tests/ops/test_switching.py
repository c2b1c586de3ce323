"""Git habits, third round (issue 39): `switch`, `restore`, `mv`, annotated tags, `push
--all/--tags/--delete`, `branch -v`, `remote -v`, `config --list/--global`, `stash` and the
method names in `merge --help` — each as git does it, from the CLI and from Python."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
import torch
from dulwich.objects import Tag
from helpers.cli import invoke
from helpers.models import (
    commit_model,
    frozen_finetune,
    small_state_dict,
    touch_later,
    tree_hashes,
    write_model,
)
from safetensors.torch import load_file

from mgit import Repository
from mgit.errors import BadInputError, DirtyWorktreeError, MgitError, NonFastForwardError
from mgit.graph.formats import FORMAT_VERSION

MODEL = "model/model.safetensors"
_sd = small_state_dict


def _tuned(repo: Repository, seed: int = 1) -> None:
    """Change the working model (a fine-tune of seed 0's layer 1)."""
    write_model(repo.root / "model", frozen_finetune(_sd(0), {0}, seed=seed))
    touch_later(repo.root / MODEL)


@pytest.fixture
def two(repo: Repository) -> tuple[Repository, str, str]:
    """main at b (a fine-tune, plus notes.txt) on a; branch side at a."""
    a = commit_model(repo, _sd(0), "a")
    repo.create_branch("side")
    _tuned(repo)
    (repo.root / "notes.txt").write_text("b only\n")
    repo.add(["model", "notes.txt"])
    return repo, a, repo.commit("b")


def _changes(repo: Repository) -> tuple[dict[str, str], dict[str, str]]:
    s = repo.status()
    return {f.path: f.change for f in s.staged}, {f.path: f.change for f in s.unstaged}


# -- switch -------------------------------------------------------------------------------------


def test_switch_to_a_branch_a_new_branch_and_detached(two):
    repo, a, b = two
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


def test_switch_refuses_a_revision_that_is_no_branch_and_changes_nothing(two):
    repo, a, _ = two
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


def test_switch_refuses_local_changes_in_the_way_unless_forced(two):
    repo, a, _ = two
    (repo.root / "notes.txt").write_text("local edit\n")
    proc = invoke("switch", "side", cwd=repo.root)
    assert proc.returncode == 4 and "notes.txt" in proc.stderr
    assert (repo.root / "notes.txt").read_text() == "local edit\n"
    invoke("switch", "side", "--discard-changes", cwd=repo.root, check=True)
    assert repo.refs.head() == a and not (repo.root / "notes.txt").exists()


def test_switch_makes_the_local_branch_of_a_remotes_branch(two, tmp_path):
    repo, _, b = two
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


def test_restore_brings_a_working_file_back_from_the_index(two):
    repo, _, _ = two
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


def test_restore_source_writes_a_revisions_file_and_leaves_the_index(two):
    repo, a, _ = two
    a_model = tree_hashes(repo.root)  # b's files
    res = repo.restore([MODEL], source="side")
    assert res.written == [MODEL] and res.source == a
    assert tree_hashes(repo.root)[MODEL] != a_model[MODEL]
    assert _changes(repo) == ({}, {MODEL: "modified"})  # index untouched: the file differs from it
    invoke("restore", "--source", "side", "notes.txt", cwd=repo.root, check=True)  # side lacks it: removed
    assert not (repo.root / "notes.txt").exists()
    assert _changes(repo) == ({}, {MODEL: "modified", "notes.txt": "deleted"})


def test_restore_staged_unstages_and_staged_worktree_resets_both(two):
    repo, _, _ = two
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


def test_restore_refuses_a_path_neither_side_has(two):
    repo, _, _ = two
    proc = invoke("restore", "nothing.txt", cwd=repo.root)
    assert proc.returncode == 2
    assert proc.stderr.strip() == "error: pathspec 'nothing.txt' did not match any file in the index"
    with pytest.raises(BadInputError, match="did not match any file in the index or side"):
        repo.restore(["nothing.txt"], source="side")


# -- mv -----------------------------------------------------------------------------------------


def test_mv_renames_a_file_and_a_directory_in_tree_and_index(two):
    repo, _, _ = two
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


def test_mv_into_a_directory_and_its_refusals(two):
    repo, _, _ = two
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


# -- annotated tags -----------------------------------------------------------------------------


def test_annotated_tag_is_a_git_tag_object_peeled_as_a_revision(two):
    repo, a, b = two
    invoke("tag", "-a", "v1", "-m", "first release", "side", cwd=repo.root, check=True)
    repo.tag("v0", b)
    raw = repo.refs.tag_refs()["v1"]
    obj = repo.graph.read(raw)
    assert isinstance(obj, Tag) and obj.object[1].decode() == a and obj.name == b"v1"
    assert repo.tags() == {"v0": b, "v1": a} and repo.resolve("v1") == a and repo.resolve("v1~0") == a
    assert invoke("log", "--oneline", "v1", cwd=repo.root, check=True).stdout.startswith(a[:12])
    listed = invoke("tag", "-n", cwd=repo.root, check=True).stdout.splitlines()
    assert [line.split(None, 1) for line in listed] == [["v0", "b"], ["v1", "first release"]]
    doc = json.loads(invoke("tag", "--json", cwd=repo.root, check=True).stdout)
    assert doc["tags"][1] == {"name": "v1", "commit": a, "annotated": True, "message": "first release"}
    assert doc["tags"][0]["annotated"] is False and doc["tags"][0]["message"] is None
    repo.checkout("v1")
    assert repo.refs.head() == a
    refused = invoke("tag", "-a", "v2", cwd=repo.root)
    assert refused.returncode == 2 and "an annotated tag needs its message" in refused.stderr
    if shutil.which("git"):  # readable by git itself
        shown = subprocess.run(["git", f"--git-dir={repo.git_dir}", "cat-file", "-p", "v1"], capture_output=True)
        assert shown.returncode == 0 and b"tag v1" in shown.stdout and b"first release" in shown.stdout


# -- push --all / --tags / --delete -------------------------------------------------------------


@pytest.fixture
def pushed(two, tmp_path):
    repo, a, b = two
    url = str(tmp_path / "remote.mgit")
    repo.remote_add("origin", url)
    repo.push()
    return repo, a, b, url


def test_push_all_and_tags(pushed):
    repo, a, b, url = pushed
    repo.tag("v1", message="annotated")
    repo.tag("light", "side")
    t = repo.push(all_branches=True)
    theirs = repo._backend("origin").refs()
    assert theirs["refs/heads/side"] == a and theirs["refs/heads/main"] == b and "refs/tags/v1" not in theirs
    assert set(t.refs) == {"refs/heads/main", "refs/heads/side"}
    doc = json.loads(invoke("push", "--tags", "--json", cwd=repo.root, check=True).stdout)
    assert set(doc["refs"]) == {"refs/tags/v1", "refs/tags/light"}
    theirs = repo._backend("origin").refs()
    assert theirs["refs/tags/v1"] == repo.refs.tag_refs()["v1"] != b  # the tag object itself
    with Repository.clone(url, repo.root.parent / "clone") as clone:
        assert clone.tags() == {"v1": b, "light": a} and clone.refs.tag_message("v1") == "annotated"


def test_push_tags_refuses_moving_a_remote_tag_unless_forced(pushed):
    repo, a, b, _ = pushed
    repo.tag("v1", "side")
    repo.push(tags=True)
    repo.delete_tag("v1")
    repo.tag("v1", "main")
    repo.tag("v2")
    with pytest.raises(NonFastForwardError, match="refs/tags/v1 exists and names another object"):
        repo.push(tags=True)
    theirs = repo._backend("origin").refs()
    assert theirs["refs/tags/v1"] == a and theirs["refs/tags/v2"] == b  # the others were pushed
    repo.push(tags=True, force=True)
    assert repo._backend("origin").refs()["refs/tags/v1"] == b


def test_push_delete_removes_the_remote_branch_and_its_tracking_branch(pushed):
    repo, a, _, _ = pushed
    repo.push("origin", "side")
    assert "origin/side" in repo.remote_branches()
    doc = json.loads(invoke("push", "--delete", "origin", "side", "--json", cwd=repo.root, check=True).stdout)
    assert doc["refs"] == {"refs/heads/side": {"old": a, "new": None}}
    assert "refs/heads/side" not in repo._backend("origin").refs() and "origin/side" not in repo.remote_branches()
    assert repo.branches()["side"] == a  # the local branch stays
    gone = invoke("push", "-d", "origin", "side", cwd=repo.root)
    assert gone.returncode == 1 and "the remote 'origin' has no such branch or tag" in gone.stderr
    default = invoke("push", "--delete", "origin", "main", cwd=repo.root)
    assert default.returncode == 2 and "the remote's default branch" in default.stderr
    assert "refs/heads/main" in repo._backend("origin").refs()


# -- branch -v, remote -v ----------------------------------------------------------------------


def test_branch_verbose_shows_commit_subject_and_upstream(pushed):
    repo, a, b, _ = pushed
    out = invoke("branch", "-v", cwd=repo.root, check=True).stdout.splitlines()
    assert out == [f"* main {b[:12]} b", f"  side {a[:12]} a"]
    commit_model(repo, _sd(3), "c")
    out = invoke("branch", "-vv", cwd=repo.root, check=True).stdout.splitlines()
    assert out[0].startswith("* main ") and out[0].endswith(" [origin/main: ahead 1] c")
    assert out[1] == f"  side {a[:12]} a"  # no upstream: none shown
    info = {i.name: i for i in repo.branch_info(upstreams=True)}
    assert (info["main"].upstream, info["main"].ahead, info["main"].behind) == ("origin/main", 1, 0)


def test_remote_verbose_prints_fetch_and_push_urls(pushed):
    repo, _, _, url = pushed
    out = invoke("remote", "-v", cwd=repo.root, check=True).stdout
    assert out == f"origin\t{url} (fetch)\norigin\t{url} (push)\n"


# -- config -------------------------------------------------------------------------------------


def test_config_global_and_list(repo, tmp_path, monkeypatch):
    home = tmp_path / "home"
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_CONFIG_GLOBAL"):
        monkeypatch.delenv(var, raising=False)
    home.mkdir()
    (home / ".gitconfig").write_text("[user]\n\tname = Git Ada\n\temail = ada@git\n")
    assert repo.identity() == b"Git Ada <ada@git>"  # git's own config, when mgit sets nothing
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    invoke("config", "--global", "user.name", "Mgit Ada", cwd=outside, check=True)  # no repository needed
    assert (tmp_path / "xdg" / "mgit" / "config").read_text().count("Mgit Ada") == 1
    assert invoke("config", "--global", "user.name", cwd=outside, check=True).stdout == "Mgit Ada\n"
    assert repo.identity() == b"Mgit Ada <ada@git>"  # the user's mgit file wins over git's
    repo.config_set("user.name", "Local Ada")
    assert repo.identity() == b"Local Ada <ada@git>" and repo.config_get("user.name", "global") == "Mgit Ada"
    listed = invoke("config", "--list", cwd=repo.root, check=True).stdout.splitlines()
    assert listed[:2] == ["user.name=Git Ada", "user.email=ada@git"] and listed[-1] == "user.name=Local Ada"
    assert "user.name=Mgit Ada" in listed and f"mgit.formatversion={FORMAT_VERSION}" in listed
    doc = json.loads(invoke("config", "--list", "--global", "--json", cwd=repo.root, check=True).stdout)
    assert doc == {"schema": "mgit.config/1", "entries": [{"scope": "global", "key": "user.name", "value": "Mgit Ada"}]}
    invoke("config", "remote.my.host.url", "x", cwd=repo.root, check=True)  # a subsection with dots
    assert repo.config_get("remote.my.host.url") == "x"
    assert invoke("config", "nodot", "x", cwd=repo.root).returncode == 2


# -- stash --------------------------------------------------------------------------------------


def test_stash_sets_changes_aside_and_pop_restores_them_byte_for_byte(two):
    repo, _, b = two
    committed = tree_hashes(repo.root)
    _tuned(repo, seed=5)
    (repo.root / "new.txt").write_text("a new file\n")
    repo.add(["new.txt"])
    (repo.root / "notes.txt").unlink()
    (repo.root / "untracked.txt").write_text("stays\n")
    dirty, dirty_status = tree_hashes(repo.root), _changes(repo)
    out = invoke("stash", cwd=repo.root, check=True).stdout
    assert out == f"Saved working directory and index state WIP on main: {b[:12]} b\n"
    assert tree_hashes(repo.root) == {**committed, "untracked.txt": dirty["untracked.txt"]}
    assert repo.status().untracked == ["untracked.txt"] and not repo.status().staged
    (entry,) = repo.stash_list()
    assert repo.resolve("stash@{0}") == entry.commit and repo.graph.commit(entry.commit).parents[0] == b
    assert invoke("stash", "list", cwd=repo.root, check=True).stdout == f"stash@{{0}}: WIP on main: {b[:12]} b\n"
    repo.gc(grace_seconds=0)  # the stash is a root: nothing of it goes
    popped = invoke("stash", "pop", cwd=repo.root, check=True)
    assert popped.stdout == f"Dropped stash@{{0}} ({entry.commit[:12]})\n"
    assert tree_hashes(repo.root) == dirty and _changes(repo) == dirty_status  # new.txt still added, as git
    assert repo.stash_list() == [] and not (repo.git_dir / "refs" / "stash").exists()


def test_stash_index_restores_the_index_exactly_and_entries_stack(two):
    repo, _, _ = two
    (repo.root / "notes.txt").write_text("staged\n")
    repo.add(["notes.txt"])
    (repo.root / "notes.txt").write_text("then edited\n")
    staged_then = {p: ie.entry for p, ie in repo._index().entries.items()}
    first = repo.stash("notes work")
    (repo.root / "model" / "config.json").write_text('{"second": 1}\n')
    second = repo.stash()
    assert [e.commit for e in repo.stash_list()] == [second, first]
    assert repo.stash_list()[1].message == "On main: notes work" and repo.resolve("stash@{1}") == first
    invoke("stash", "apply", "stash@{1}", "--index", cwd=repo.root, check=True)
    assert {p: ie.entry for p, ie in repo._index().entries.items()} == staged_then
    assert (repo.root / "notes.txt").read_text() == "then edited\n" and len(repo.stash_list()) == 2
    repo.reset("HEAD", mode="hard")
    assert invoke("stash", "drop", "1", cwd=repo.root, check=True).stdout == f"Dropped stash@{{1}} ({first[:12]})\n"
    assert [e.commit for e in repo.stash_list()] == [second] and repo.resolve("stash") == second
    repo.stash_drop()
    assert repo.stash_list() == []


def test_stash_pop_onto_a_moved_head(two):
    """HEAD moved elsewhere: restoring the stash's paths is exact. HEAD changed a path the stash
    changed: the stash is merged onto HEAD three-way (other lines, other tensors), as git's
    stash apply merges; the same lines both ways are a conflict that changes nothing."""
    repo, _, _ = two
    (repo.root / "notes.txt").write_text("stashed edit\n")
    repo.stash()
    (repo.root / "model" / "config.json").write_text('{"elsewhere": 1}\n')
    repo.add(["model"])
    repo.commit("config only")
    repo.stash_pop()
    assert (repo.root / "notes.txt").read_text() == "stashed edit\n"
    repo.reset("HEAD", mode="hard")

    (repo.root / "notes.txt").write_text("one\ntwo\nthree\nfour\n")
    repo.add(["notes.txt"])
    repo.commit("four lines")
    (repo.root / "notes.txt").write_text("ONE\ntwo\nthree\nfour\n")
    repo.stash()
    (repo.root / "notes.txt").write_text("one\ntwo\nthree\nFOUR\n")
    repo.add(["notes.txt"])
    head = repo.commit("last line")
    repo.stash_pop()
    assert (repo.root / "notes.txt").read_text() == "ONE\ntwo\nthree\nFOUR\n"
    assert repo.refs.head() == head and repo.stash_list() == []
    assert _changes(repo) == ({}, {"notes.txt": "modified"})  # unstaged, as git leaves it
    repo.reset("HEAD", mode="hard")

    (repo.root / "notes.txt").write_text("stashed\ntwo\nthree\nFOUR\n")
    repo.stash()
    (repo.root / "notes.txt").write_text("committed meanwhile\ntwo\nthree\nFOUR\n")
    repo.add(["notes.txt"])
    repo.commit("first line too")
    before = tree_hashes(repo.root)
    proc = invoke("stash", "pop", cwd=repo.root)
    assert proc.returncode == 5 and "CONFLICT" in proc.stdout and "notes.txt" in proc.stdout
    assert tree_hashes(repo.root) == before and len(repo.stash_list()) == 1
    proc = invoke("stash", "apply", "--index", cwd=repo.root)
    assert proc.returncode == 1 and "apply without --index" in proc.stderr


def test_stash_of_one_tensor_merges_onto_a_head_that_changed_another(two):
    repo, _, _ = two
    sd = _sd(0)
    stashed = dict(sd, **{"lm_head.weight": sd["lm_head.weight"] + 1})
    write_model(repo.root / "model", stashed)
    touch_later(repo.root / MODEL)
    repo.stash()
    theirs = dict(sd, **{"model.norm.weight": sd["model.norm.weight"] * 2})
    repo.commit_state_dict(theirs, model="model", message="norm")
    repo.stash_pop()
    got = repo.status()
    assert [f.path for f in got.unstaged] == [MODEL]
    want = dict(theirs, **{"lm_head.weight": stashed["lm_head.weight"]})
    loaded = load_file(repo.root / MODEL)
    assert set(loaded) == set(want) and all(torch.equal(loaded[k], want[k]) for k in want)


def test_stash_refusals(repo):
    assert invoke("stash", cwd=repo.root).returncode == 2  # before the first commit
    commit_model(repo, _sd(0), "a")
    assert invoke("stash", cwd=repo.root, check=True).stdout == "No local changes to save\n"
    with pytest.raises(BadInputError, match="no stash entries"):
        repo.stash_pop()
    (repo.root / "model" / "config.json").write_text('{"stashed": 1}\n')
    repo.stash()
    (repo.root / "model" / "config.json").write_text('{"local": 1}\n')
    with pytest.raises(DirtyWorktreeError, match="stash apply would overwrite uncommitted changes in model/config"):
        repo.stash_pop()
    assert (repo.root / "model" / "config.json").read_text() == '{"local": 1}\n' and len(repo.stash_list()) == 1
    with pytest.raises(BadInputError, match=r"stash@\{3\} does not exist"):
        repo.stash_drop(3)
    with pytest.raises(MgitError):
        repo.stash_apply(1)


# -- merge --help -------------------------------------------------------------------------------


def test_merge_help_lists_every_method_without_importing_torch():
    from mgit.merge.methods.registry import METHODS

    code = (
        "import sys; from mgit.cli import main; rc = main(['merge', '--help']); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("Methods (--method; docs/merging.md):")[1]
    assert [
        line.split()[0] for line in listed.splitlines() if line.startswith("  ") and not line.startswith("   ")
    ] == sorted(METHODS)
