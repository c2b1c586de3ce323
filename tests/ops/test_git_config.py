"""The review of the third round of git habits (issue 39, findings on refs, workflow and
history): each refusal leaves everything as it was, and each behaviour is git's. Config keys
git cannot read are refused before they are written, and a damaged config file is named with
its bad line; `mv` refuses nested sources and destinations under a symbolic link; `push`
refuses a name that is no branch or tag and says what it pushed; `log -n -1` is no limit;
`switch --detach` alone detaches at HEAD; `status` collapses untracked directories and prints
paths from the current directory; log decorations carry ``HEAD ->`` and remote-tracking names."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.models import tree_hashes

from mgit import Repository
from mgit.errors import BadInputError, NonFastForwardError
from mgit.graph.formats import FORMAT_VERSION

GIT = shutil.which("git")


def _text_commit(repo: Repository, files: dict[str, str], message: str) -> str:
    for rel, text in files.items():
        (repo.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / rel).write_text(text)
    repo.add(list(files))
    return repo.commit(message)


@pytest.fixture
def isolated_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The user's mgit file under the test's directory (git's own files: none); returns its path."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    return tmp_path / "xdg" / "mgit" / "config"


# -- config -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("key", "message"),
    [
        ("user.na me", "invalid config key 'user.na me': the name 'na me' must start with a letter"),
        ("remote.origin.", "config key 'remote.origin.' has no name"),
        ("user.1name", "the name '1name' must start with a letter"),
        ("us_er.name", "the section 'us_er' may hold only letters, digits and '-'"),
        ("nodot", "config key 'nodot' has no section"),
        ("remote.a\nb.url", "the subsection may hold no newline or NUL"),
    ],
)
def test_config_refuses_a_key_git_cannot_read_before_writing(repo, isolated_config, key, message):
    local = repo.git_dir / "config"
    before = local.read_bytes()
    for args in (("config", key, "x"), ("config", "--global", key, "x")):
        proc = invoke(*args, cwd=repo.root)
        assert proc.returncode == 2 and proc.stderr.startswith("error: ") and message in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1
    assert local.read_bytes() == before and not isolated_config.exists()
    with pytest.raises(BadInputError):
        repo.config_set(key, "x")
    assert invoke("status", cwd=repo.root).returncode == 0


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_config_keys_git_takes_are_written_so_git_reads_them_back(repo, isolated_config):
    for key in ("remote.my.host.url", 'remote.a"b]c.url', "remote..url", "x-y.name-2"):
        invoke("config", key, "v", cwd=repo.root, check=True)
        assert invoke("config", key, cwd=repo.root, check=True).stdout == "v\n"
    listed = subprocess.run([GIT, "config", "--file", str(repo.git_dir / "config"), "--list"], capture_output=True)
    assert listed.returncode == 0, listed.stderr
    assert b'remote.a"b]c.url=v' in listed.stdout and b"remote..url=v" in listed.stdout


def test_a_damaged_global_config_is_named_in_one_line_by_every_command(repo, isolated_config):
    isolated_config.parent.mkdir(parents=True)
    isolated_config.write_text("[user]\n\tname = Ada\n\tbad key = 1\n")
    for args in (("status",), ("config", "--global", "--list"), ("config", "--global", "user.email", "a@b")):
        proc = invoke(*args, cwd=repo.root)
        assert proc.returncode == 2, proc.stderr
        assert proc.stderr.startswith(f"error: bad config line 3 in file {isolated_config} (invalid variable name")
        assert proc.stderr.endswith("): fix or delete that line in an editor\n") and proc.stderr.count("\n") == 1
    assert isolated_config.read_text() == "[user]\n\tname = Ada\n\tbad key = 1\n"
    isolated_config.write_text("[user]\n\tname = Ada\n")  # fixed by hand as the line says: all works again
    assert invoke("status", cwd=repo.root).returncode == 0


def test_a_damaged_local_config_is_named_in_one_line(repo, isolated_config):
    local = repo.git_dir / "config"
    repo.close()
    lines = local.read_bytes().count(b"\n")
    local.write_bytes(local.read_bytes() + b"[user]\n\tna me = x\n")
    for args in (("log",), ("config", "--list"), ("config", "user.name", "Ada")):
        proc = invoke(*args, cwd=local.parent.parent)
        assert proc.returncode == 2 and proc.stderr.startswith(f"error: bad config line {lines + 2} in file {local} ")
        assert len(proc.stderr.splitlines()) == 1


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


# -- push ---------------------------------------------------------------------------------------


@pytest.fixture
def remote(repo: Repository, tmp_path: Path) -> tuple[Repository, str]:
    first = _text_commit(repo, {"a.txt": "a\n"}, "a")
    repo.remote_add("origin", str(tmp_path / "remote.mgit"))
    repo.push()
    return repo, first


def test_push_refuses_a_name_that_is_no_branch_or_tag(remote):
    repo, first = remote
    before = repo._backend("origin").refs()
    for name in (first[:12], first, "main~0", "nosuch"):
        proc = invoke("push", "origin", name, cwd=repo.root)
        assert proc.returncode == 2 and f"{name!r} is not a local branch or tag: nothing was pushed" in proc.stderr
        assert repo._backend("origin").refs() == before
    second = _text_commit(repo, {"b.txt": "b\n"}, "b")
    invoke("push", "origin", "HEAD", cwd=repo.root, check=True)  # HEAD: the current branch, as git's
    after = repo._backend("origin").refs()
    assert after["refs/heads/main"] == second and "refs/heads/HEAD" not in after


def test_push_of_several_refs_says_which_were_pushed(remote):
    repo, first = remote
    repo.tag("v1")
    repo.tag("v2")
    repo.push(tags=True)
    second = _text_commit(repo, {"b.txt": "b\n"}, "b")
    for name in ("v1", "v2"):
        repo.delete_tag(name)
        repo.tag(name, second)
    with pytest.raises(NonFastForwardError) as every:
        repo.push(tags=True)
    assert str(every.value).endswith("; nothing was pushed") and "other refs" not in str(every.value)
    repo.tag("v3")
    with pytest.raises(NonFastForwardError) as some:
        repo.push(tags=True)
    assert str(some.value).endswith("; pushed refs/tags/v3")
    assert repo._backend("origin").refs()["refs/tags/v1"] == first


# -- log -n, switch --detach, decorations -------------------------------------------------------


@pytest.fixture
def three(repo: Repository) -> tuple[Repository, list[str]]:
    return repo, [_text_commit(repo, {"f.txt": f"{n}\n"}, f"c{n}") for n in range(3)]


def test_log_with_a_negative_count_shows_every_commit_as_git(three):
    repo, commits = three
    newest_first = commits[::-1]
    assert [c.id for c in repo.log(max_count=-1)] == newest_first
    assert [c.id for c in repo.log_graph(max_count=-1).commits] == newest_first
    for args in (("-n", "-1"), ("--graph", "-n", "-1"), ("--max-count=-5",)):
        out = invoke("log", "--format=%H", *args, cwd=repo.root, check=True).stdout
        assert [line.lstrip("* ") for line in out.splitlines()] == newest_first
    assert invoke("log", "-n", "0", cwd=repo.root, check=True).stdout == ""


def test_switch_detach_without_a_revision_detaches_at_head(three):
    repo, commits = three
    proc = invoke("switch", "--detach", cwd=repo.root, check=True)
    assert "HEAD is now detached at" in proc.stderr
    assert repo.refs.current_branch() is None and repo.refs.head() == commits[-1]
    repo.switch("main")
    repo.switch(detach=True)
    assert repo.refs.current_branch() is None and repo.refs.head() == commits[-1]


def test_log_decorations_carry_head_and_remote_tracking_names_in_gits_order(remote):
    repo, first = remote
    repo.tag("v1")
    repo.create_branch("side")
    fmt = "--format=%h%d|%D"
    assert invoke("log", fmt, cwd=repo.root, check=True).stdout == (
        f"{first[:12]} (HEAD -> main, tag: v1, origin/main, side)|HEAD -> main, tag: v1, origin/main, side\n"
    )
    line = invoke("log", "--oneline", cwd=repo.root, check=True).stdout
    assert line == f"{first[:12]} (HEAD -> main, tag: v1, origin/main, side) a\n"
    repo.switch(detach=True)
    assert invoke("log", "--format=%D", cwd=repo.root, check=True).stdout == "HEAD, tag: v1, origin/main, side, main\n"
    if GIT is not None:  # git reads the same refs: the same decoration
        shown = subprocess.run(
            [GIT, f"--git-dir={repo.git_dir}", "log", "--format=%D"], capture_output=True, text=True, check=True
        )
        assert shown.stdout == "HEAD, tag: v1, origin/main, side, main\n"


# -- status -------------------------------------------------------------------------------------


@pytest.fixture
def untracked(repo: Repository) -> Repository:
    _text_commit(repo, {"a/t": "t\n"}, "t")
    for rel in ("a/b/u", "out/x/y", "out/z", "top"):
        (repo.root / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo.root / rel).write_text("x\n")
    (repo.root / "a" / "t").write_text("changed\n")
    return repo


def test_status_short_collapses_untracked_directories_and_prints_paths_from_here(untracked):
    """As git prints it (checked against git 2.x in the same layout)."""
    repo = untracked
    assert invoke("status", "-s", cwd=repo.root, check=True).stdout == " M a/t\n?? a/b/\n?? out/\n?? top\n"
    assert invoke("status", "-s", cwd=repo.root / "a", check=True).stdout == " M t\n?? b/\n?? ../out/\n?? ../top\n"
    inside = invoke("status", "-s", cwd=repo.root / "out", check=True).stdout
    assert inside == " M ../a/t\n?? ../a/b/\n?? ./\n?? ../top\n"
    porcelain = invoke("status", "--porcelain", cwd=repo.root / "a", check=True).stdout
    assert porcelain == " M a/t\n?? a/b/\n?? out/\n?? top\n"  # from the root, as git's porcelain
    assert repo.status().untracked == ["a/b/u", "out/x/y", "out/z", "top"]  # the API lists every file


def test_status_lists_untracked_directories_and_paths_as_status_short(untracked):
    out = invoke("status", cwd=untracked.root / "a", check=True).stdout
    assert "  modified:  t\n" in out and out.endswith("\nUntracked files:\n  b/\n  ../out/\n  ../top\n")


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
