"""The CLI as a user types it: the issue's walkthrough, and one clear line per bad input."""

from __future__ import annotations

import json
import shutil
import struct

import pytest
from helpers.cli import invoke
from helpers.models import frozen_finetune, llama_state_dict, minilm_dir, tree_hashes, write_model
from helpers.run import run_mgit


def assert_one_line_error(proc, *fragments: str) -> None:
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in proc.stderr + proc.stdout
    for f in fragments:
        assert f in lines[0], lines[0]


@pytest.fixture
def work(tmp_path):
    """conftest's `work` (an initialised repository with a committer), made in-process: three
    interpreter start-ups less per test. The walkthrough below still types every command."""
    d = tmp_path / "work"
    d.mkdir()
    invoke("init", cwd=d, check=True)
    invoke("config", "user.name", "Ada", cwd=d, check=True)
    invoke("config", "user.email", "ada@example.com", cwd=d, check=True)
    return d


@pytest.mark.slow
def test_walkthrough(work):
    write_model(work / "model", llama_state_dict(), shards=2)
    run_mgit("add", "model/", cwd=work, check=True)
    st = json.loads(run_mgit("status", "--json", cwd=work, check=True).stdout)
    assert st["schema"] == "mgit.status/1" and len(st["staged"]) == 4
    run_mgit("commit", "-m", "base", cwd=work, check=True)
    base = tree_hashes(work)
    run_mgit("tag", "v1", cwd=work, check=True)

    run_mgit("checkout", "-b", "sft", cwd=work, check=True)
    tuned = frozen_finetune(llama_state_dict(), {0, 1})
    write_model(work / "model", tuned, shards=2)
    out = run_mgit("status", cwd=work, check=True).stdout
    assert "modified:" in out and "tensor(s) changed" in out
    run_mgit("add", "model/", cwd=work, check=True)
    run_mgit("commit", "-m", "sft", cwd=work, check=True)
    sft = tree_hashes(work)

    log = run_mgit("log", "--oneline", cwd=work, check=True).stdout.splitlines()
    assert len(log) == 2 and "sft" in log[0] and "base" in log[1]
    assert "Author: Ada <ada@example.com>" in run_mgit("log", cwd=work, check=True).stdout
    assert len(run_mgit("log", "--oneline", "--", "model/config.json", cwd=work, check=True).stdout.splitlines()) == 1
    logj = json.loads(run_mgit("log", "--json", cwd=work, check=True).stdout)
    assert logj["schema"] == "mgit.log/1" and len(logj["commits"]) == 2

    branches = run_mgit("branch", cwd=work, check=True).stdout
    assert "* sft" in branches and "main" in branches
    run_mgit("checkout", "main", cwd=work, check=True)
    assert tree_hashes(work) == base
    run_mgit("checkout", "sft", cwd=work, check=True)
    assert tree_hashes(work) == sft

    (work / "model" / "config.json").write_text("{}")
    run_mgit("checkout", "v1", "--", "model/config.json", cwd=work, check=True)
    assert tree_hashes(work)["model/config.json"] == base["model/config.json"]

    show = json.loads(run_mgit("show", "v1", "--json", cwd=work, check=True).stdout)
    assert show["schema"] == "mgit.show/1"
    assert sum(f["tensors"] for f in show["files"]) == len(tuned)
    assert 0 < show["stored_bytes"] < show["logical_bytes"]
    text = run_mgit("show", "v1", cwd=work, check=True).stdout
    assert "logical" in text and "stored" in text

    detached = run_mgit("checkout", "HEAD~1", cwd=work)
    assert detached.returncode == 0 and "detached" in detached.stderr
    run_mgit("checkout", "main", cwd=work, check=True)
    run_mgit("branch", "old", cwd=work, check=True)
    run_mgit("branch", "-d", "old", cwd=work, check=True)
    assert "old" not in run_mgit("branch", cwd=work, check=True).stdout

    run_mgit("rm", "model/config.json", cwd=work, check=True)
    assert "deleted:" in run_mgit("status", cwd=work, check=True).stdout
    assert (work / ".mgit" / "HEAD").is_file()


def test_git_can_read_the_graph(work):
    shutil.copytree(minilm_dir(), work / "m")
    invoke("add", "m", cwd=work, check=True)
    invoke("commit", "-m", "real model", cwd=work, check=True)
    git = shutil.which("git")
    if git is None:
        pytest.skip("git not installed")
    import subprocess

    out = subprocess.run([git, "--git-dir", str(work / ".mgit"), "log", "--oneline"], capture_output=True, text=True)
    assert out.returncode == 0 and "real model" in out.stdout
    fsck = subprocess.run([git, "--git-dir", str(work / ".mgit"), "fsck", "--strict"], capture_output=True, text=True)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr


def bad_file(work, name: str, content: bytes) -> None:
    (work / "model").mkdir(exist_ok=True)
    (work / "model" / name).write_bytes(content)


def header(obj) -> bytes:
    body = json.dumps(obj).encode()
    return struct.pack("<Q", len(body)) + body


F32_2 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"\x00\x01", "truncated"),
        (struct.pack("<Q", 99999) + b"{}", "beyond the end of the file"),
        (struct.pack("<Q", 6) + b'{"t": ', "not valid JSON"),
        (struct.pack("<Q", 4) + b"\xff\xfe\xfd\xfc", "not valid UTF-8"),
        (header({"t": {"dtype": "X9", "shape": [2], "data_offsets": [0, 8]}}) + b"\0" * 8, "unknown dtype"),
        (header({"t": {"dtype": "F32", "shape": [5], "data_offsets": [0, 8]}}) + b"\0" * 8, "needs 20 bytes"),
        (header({"t": F32_2}) + b"\0" * 3, "beyond the data"),
        (
            header({"a": F32_2, "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}}) + b"\0" * 12,
            "overlaps",
        ),
    ],
)
def test_bad_safetensors_give_one_line_and_change_nothing(work, content, fragment):
    bad_file(work, "model.safetensors", content)
    proc = invoke("add", "model", cwd=work)
    assert_one_line_error(proc, "model/model.safetensors", fragment)
    assert not (work / ".mgit" / "mgit-index.json").exists()
    debug = run_mgit("--debug", "add", "model", cwd=work)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_duplicate_tensor_names(work):
    body = (
        b'{"t": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},'
        b' "t": {"dtype": "F32", "shape": [2], "data_offsets": [8, 16]}}'
    )
    bad_file(work, "dup.safetensors", struct.pack("<Q", len(body)) + body + b"\0" * 16)
    assert_one_line_error(invoke("add", "model", cwd=work), "duplicate tensor name")


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (("add", "../elsewhere"), "outside the repository"),
        (("add", "/etc/passwd"), "outside the repository"),
        (("add", "no-such-dir"), "did not match"),
        (("checkout", "no-such-rev"), "unknown revision"),
        (("show", "HEAD~7"), "beyond the first commit"),
        (("log", "v9"), "unknown revision"),
        (("commit", "-m", "nothing"), "nothing to commit"),
        (("branch", "-d", "ghost"), "not found"),
        (("branch", "bad..name"), "invalid branch name"),
        (("checkout", "main", "--", "not/tracked"), "not in revision"),
    ],
)
def test_bad_arguments_give_one_line(work, args, fragment):
    (work / "f.txt").write_text("x")
    invoke("add", "f.txt", cwd=work, check=True)
    invoke("commit", "-m", "one", cwd=work, check=True)
    assert_one_line_error(invoke(*args, cwd=work), fragment)


def test_not_a_repository(tmp_path):
    assert_one_line_error(invoke("status", cwd=tmp_path), "not an mgit repository")


def test_dirty_checkout_is_refused(work):
    (work / "a.txt").write_text("1")
    invoke("add", "a.txt", cwd=work, check=True)
    invoke("commit", "-m", "one", cwd=work, check=True)
    invoke("checkout", "-b", "two", cwd=work, check=True)
    (work / "a.txt").write_text("2")
    invoke("add", "a.txt", cwd=work, check=True)
    invoke("commit", "-m", "two", cwd=work, check=True)
    invoke("checkout", "main", cwd=work, check=True)
    (work / "a.txt").write_text("local")
    assert_one_line_error(invoke("checkout", "two", cwd=work), "uncommitted changes", "--force")
    assert (work / "a.txt").read_text() == "local"
    invoke("checkout", "--force", "two", cwd=work, check=True)
    assert (work / "a.txt").read_text() == "2"


def test_everyday_commands_do_not_import_torch():
    """torch costs ~1.5 s of start-up: only merges and Python tensor APIs may load it."""
    import subprocess
    import sys

    code = "import sys, mgit.cli; sys.exit('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
