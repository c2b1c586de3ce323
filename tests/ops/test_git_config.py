"""Configuration as git keeps it: keys git cannot read are refused before they are written, a
damaged config file is named with its bad line by every command, `config --list/--global`."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from helpers.cli import invoke

from mgit.errors import BadInputError
from mgit.graph.formats import FORMAT_VERSION

GIT = shutil.which("git")


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
