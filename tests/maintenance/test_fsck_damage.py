"""A corruption corpus: one damaged thing at a time (loose commit, tree, blob and manifest,
flipped or cut short; a chunk pack's magic, record or index; a ref file, a packed-refs line,
HEAD). fsck must name it and never fail with an internal error; every other command that
meets it says so in one line; ``fsck --repair`` with a directory remote holding intact
copies restores everything, byte for byte."""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.cli import Result, invoke
from helpers.models import LlamaSpec, commit_model, llama_state_dict, tree_hashes

from mgit import Repository
from mgit.errors import CorruptObjectError, MgitError
from mgit.graph.snapshot import file_tree

SPEC = LlamaSpec(layers=1, hidden=16, intermediate=32, vocab=32)


@dataclass
class Setup:
    repo: Repository
    first: str  # commit ids on main
    second: str
    files: dict[str, str]  # sha256 of every working file at main


@pytest.fixture
def setup(tmp_path: Path) -> Setup:
    """Two commits on main and a tag, all pushed to a directory remote ``origin``."""
    repo = Repository.init(tmp_path / "work")
    sd = llama_state_dict(SPEC)
    first = commit_model(repo, sd, "one")
    sd["lm_head.weight"] = sd["lm_head.weight"] * 2
    second = commit_model(repo, sd, "two")
    repo.tag("v1", first)
    repo.remote_add("origin", str(tmp_path / "remote"))
    repo.push("origin")
    repo.push("origin", "v1")
    yield Setup(repo, first, second, tree_hashes(repo.root))
    repo.close()


# -- damage -----------------------------------------------------------------------------------


def _loose(repo: Repository, sha: str) -> Path:
    return repo.git_dir / "objects" / sha[:2] / sha[2:]


def _flip(path: Path, offset: int) -> None:
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[offset % len(data)] ^= 0x40
    path.write_bytes(bytes(data))


def _cut(path: Path, keep: int) -> None:
    os.chmod(path, 0o644)
    data = path.read_bytes()
    path.write_bytes(data[: keep if keep >= 0 else len(data) + keep])


def _root_tree(s: Setup) -> str:
    return s.repo.graph.commit(s.second).tree


def _config_blob(s: Setup) -> str:
    return s.repo.snapshot(s.second)["model/config.json"].oid


def _manifest(s: Setup) -> str:
    members = file_tree(s.repo.graph, s.repo.snapshot(s.second)["model/model.safetensors"])
    return next(oid for name, oid in sorted(members.items()) if "lm_head" in name)


def _pack(s: Setup) -> Path:
    """The pack holding the second commit's lm_head chunk (the one the first lacks)."""
    from mgit.model.filetree import load_safetensors

    stored = load_safetensors(s.repo.graph, s.repo.snapshot(s.second)["model/model.safetensors"].oid)
    return s.repo.store.location(stored.manifests["lm_head.weight"].chunks[0].id).pack


def _object(pick: Callable[[Setup], str], damage: Callable[[Path], None]) -> Callable[[Setup], str]:
    def apply(s: Setup) -> str:
        sha = pick(s)
        damage(_loose(s.repo, sha))
        return sha[:12]

    return apply


def _pack_file(suffix: str, offset: int) -> Callable[[Setup], str]:
    def apply(s: Setup) -> str:
        pack = _pack(s)
        _flip(pack.with_suffix(suffix), offset)
        return pack.stem

    return apply


def _base_raw_size(s: Setup) -> str:
    """The raw-size field in the pack record of a chunk another chunk is a delta of (the first
    commit's lm_head: the second's is stored against it). Its payload still decodes, with the
    index's size, as a link of its delta's chain: repair must not copy the record as it is."""
    store = s.repo.store
    base = next(loc.base for i in store.indexes() for loc in i.locations().values() if loc.base)
    loc = store.location(base)
    _flip(loc.pack, loc.offset + 40)  # the header: id, 4 one-byte fields, payload length, raw size
    return base[:12]


def _pack_magic_and_index(s: Setup) -> str:
    pack = _pack(s)
    _flip(pack, 2)
    _flip(pack.with_suffix(".idx"), 40)
    return pack.stem


def _pack_cut(s: Setup) -> str:
    pack = _pack(s)
    _cut(pack, len(pack.read_bytes()) * 3 // 4)
    return pack.stem


def _ref_garbage(s: Setup) -> str:
    (s.repo.git_dir / "refs/heads/main").write_bytes(b"garbage\xff\n")
    return "refs/heads/main"


def _ref_missing(s: Setup) -> str:
    (s.repo.git_dir / "refs/heads/main").write_bytes(b"1" * 40 + b"\n")
    return "111111111111"


def _packed_refs(s: Setup) -> str:
    """Refs packed as ``git pack-refs`` does, then one digit of main's line made non-hex."""
    refs = {r: v for r, v in s.repo.graph.repo.refs.as_dict().items() if r != b"HEAD"}
    lines = [b"# pack-refs with: peeled fully-peeled sorted "] + [v + b" " + r for r, v in sorted(refs.items())]
    text = b"\n".join(lines) + b"\n"
    for ref in refs:
        (s.repo.git_dir / ref.decode()).unlink()
    main = text.index(b" refs/heads/main")
    (s.repo.git_dir / "packed-refs").write_bytes(text[: main - 5] + b"z" + text[main - 4 :])
    return "refs/heads/main"


def _head_garbage(s: Setup) -> str:
    (s.repo.git_dir / "HEAD").write_bytes(b"\xff\xfe nonsense\n")
    return "HEAD"


def _reflog_line(s: Setup) -> str:
    with open(s.repo.git_dir / "logs/HEAD", "ab") as f:
        f.write(b"\x00not a reflog line\n")
    return "logs/HEAD"


def _reflog_names_a_lost_commit(s: Setup) -> str:
    """HEAD's first move, its new id one digit off (still hex: it parses, naming nothing here)."""
    path = s.repo.git_dir / "logs/HEAD"
    data = bytearray(path.read_bytes())
    data[41] = ord("0") if data[41] != ord("0") else ord("1")
    path.write_bytes(bytes(data))
    return data[41:53].decode()


DAMAGE = {
    "commit-flip": _object(lambda s: s.second, lambda p: _flip(p, len(p.read_bytes()) // 2)),
    "commit-cut": _object(lambda s: s.second, lambda p: _cut(p, len(p.read_bytes()) // 2)),
    "tree-flip": _object(_root_tree, lambda p: _flip(p, len(p.read_bytes()) // 2)),
    "tree-cut": _object(_root_tree, lambda p: _cut(p, len(p.read_bytes()) // 2)),
    "blob-flip": _object(_config_blob, lambda p: _flip(p, len(p.read_bytes()) // 2)),
    "blob-cut-trailer": _object(_config_blob, lambda p: _cut(p, -4)),  # content whole, checksum gone
    "manifest-cut": _object(_manifest, lambda p: _cut(p, len(p.read_bytes()) // 2)),
    "pack-magic": _pack_file(".pack", 1),
    "pack-record": _pack_file(".pack", 8 + 32),  # the first record's encoding byte
    "pack-index": _pack_file(".idx", 40),
    "pack-magic-and-index": _pack_magic_and_index,
    "pack-cut": _pack_cut,
    "pack-base-raw-size": _base_raw_size,
    "ref-garbage": _ref_garbage,
    "ref-missing-commit": _ref_missing,
    "packed-refs": _packed_refs,
    "head-garbage": _head_garbage,
    "reflog-line": _reflog_line,
    "reflog-lost-commit": _reflog_names_a_lost_commit,
}


def _fsck(root: Path) -> Result:
    proc = invoke("fsck", cwd=root)
    assert "internal error" not in proc.stderr + proc.stdout and "Traceback" not in proc.stderr
    return proc


@pytest.mark.parametrize("kind", sorted(DAMAGE))
def test_fsck_names_the_damage_and_repair_restores_it_from_the_remote(setup, kind):
    name = DAMAGE[kind](setup)
    root = setup.repo.root
    setup.repo.close()

    found = _fsck(root)
    assert found.returncode == 1 and name in found.stdout, found.stdout + found.stderr

    repaired = invoke("fsck", "--repair", cwd=root)
    assert "internal error" not in repaired.stderr and "Traceback" not in repaired.stderr, repaired.stderr
    assert repaired.returncode == 0, repaired.stdout + repaired.stderr  # its closing fsck found nothing

    assert _fsck(root).returncode == 0  # and stays so: one run repaired it
    with Repository(root) as fresh:
        fresh.checkout(setup.first)
        fresh.checkout("main")
        assert fresh.refs.resolve("main") == setup.second and fresh.refs.resolve("v1") == setup.first
    assert tree_hashes(root) == setup.files
    assert (root / ".mgit" / "HEAD").read_bytes() == b"ref: refs/heads/main\n"


@pytest.mark.parametrize("kind", ["commit-flip", "tree-cut", "ref-garbage", "packed-refs", "head-garbage"])
def test_commands_meeting_damage_say_so_in_one_line(setup, kind):
    name = DAMAGE[kind](setup)
    root = setup.repo.root
    setup.repo.close()
    for command in (["status"], ["log"], ["checkout", setup.first]):
        proc = invoke(*command, cwd=root)
        if kind.startswith("tree") and command == ["log"]:
            assert proc.returncode == 0  # log reads no tree
            continue
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 1 and len(lines) == 1, (command, proc.stderr)
        assert name in lines[0] and "mgit fsck --repair" in lines[0] and "internal error" not in lines[0]


def test_reading_a_damaged_object_raises_corrupt_object_error(setup):
    tree = _root_tree(setup)
    _flip(_loose(setup.repo, tree), 30)
    fresh = Repository(setup.repo.root)
    with pytest.raises(CorruptObjectError, match=tree[:12]):
        fresh.snapshot("HEAD")
    with pytest.raises(CorruptObjectError, match=tree[:12]):
        fresh.graph.read(tree)
    fresh.close()


def test_repair_without_a_remote_names_what_is_still_damaged(setup):
    tree = _root_tree(setup)
    DAMAGE["tree-flip"](setup)
    setup.repo.remote_remove("origin")
    root = setup.repo.root
    setup.repo.close()
    proc = invoke("fsck", "--repair", cwd=root)
    assert proc.returncode == 1 and "internal error" not in proc.stderr
    assert f"still damaged: git object {tree[:12]}" in proc.stderr
    assert tree[:12] in proc.stdout  # the fsck after the repair still reports it


def test_a_ref_no_source_holds_is_named_with_what_to_do(setup):
    repo = setup.repo
    repo.create_branch("side", setup.first)
    (repo.git_dir / "logs/refs/heads/side").unlink(missing_ok=True)
    (repo.git_dir / "refs/heads/side").write_bytes(b"junk\n")
    with Repository(repo.root) as damaged:
        report = damaged.fsck_repair()
        assert list(report.graph.refs_lost) == ["refs/heads/side"]
        assert "delete .mgit/refs/heads/side" in report.graph.refs_lost["refs/heads/side"]
        assert any("refs/heads/side" in p for p in damaged.fsck())
    (repo.git_dir / "refs/heads/side").unlink()
    with Repository(repo.root) as fresh:
        assert fresh.fsck() == []


def test_a_damaged_ref_without_reflog_comes_from_the_remote_tracking_ref(setup):
    (setup.repo.git_dir / "logs/refs/heads/main").unlink()
    (setup.repo.git_dir / "refs/heads/main").write_bytes(b"\x00" * 41)
    with Repository(setup.repo.root) as damaged:
        report = damaged.fsck_repair()
    assert report.graph.refs == {"refs/heads/main": "refs/remotes/origin/main"}
    with Repository(setup.repo.root) as fresh:
        assert fresh.refs.resolve("main") == setup.second and fresh.fsck() == []


def test_damaged_tracking_and_tag_refs_come_from_the_remote(setup):
    git = setup.repo.git_dir
    (git / "logs/refs/remotes/origin/main").unlink()  # push logs tracking refs: without it, only the remote knows
    (git / "refs/remotes/origin/main").write_bytes(b"not a commit\n")
    (git / "refs/tags/v1").write_bytes(b"f" * 40 + b"\n")
    with Repository(setup.repo.root) as damaged:
        problems = damaged.fsck()
        assert any("refs/remotes/origin/main" in p for p in problems) and any("ffffffffffff" in p for p in problems)
        report = damaged.fsck_repair()
    assert report.graph.refs == {"refs/remotes/origin/main": "remote origin", "refs/tags/v1": "remote origin"}
    assert (git / "refs/tags/v1").read_text().strip() == setup.first
    with Repository(setup.repo.root) as fresh:
        assert fresh.fsck() == []


def test_a_damaged_tracking_ref_comes_back_from_its_reflog(setup):
    git = setup.repo.git_dir
    (git / "refs/remotes/origin/main").write_bytes(b"not a commit\n")
    with Repository(setup.repo.root) as damaged:
        report = damaged.fsck_repair()
    assert report.graph.refs == {"refs/remotes/origin/main": "its reflog"}
    assert (git / "refs/remotes/origin/main").read_text().strip() == setup.second
    with Repository(setup.repo.root) as fresh:
        assert fresh.fsck() == []


def test_a_lost_commit_is_fetched_from_the_remote_rather_than_the_ref_moved_back(setup):
    _loose(setup.repo, setup.second).unlink()
    with Repository(setup.repo.root) as damaged:
        assert any(setup.second[:12] in p and "missing" in p for p in damaged.fsck())
        report = damaged.fsck_repair()
    assert report.graph.objects == {setup.second: "origin"} and report.graph.refs == {}
    with Repository(setup.repo.root) as fresh:
        assert fresh.refs.resolve("main") == setup.second and fresh.fsck() == []


def test_gc_refuses_while_a_ref_is_damaged(setup):
    repo = setup.repo
    repo.create_branch("side", setup.first)
    (repo.git_dir / "refs/heads/side").write_bytes(b"junk\n")
    with Repository(repo.root) as damaged, pytest.raises(MgitError, match="refs/heads/side"):
        damaged.gc(grace_seconds=0)


@pytest.mark.parametrize("command", [["fsck", "--repair"], ["gc", "--now"]])
def test_a_single_pack_with_damaged_magic_is_rewritten(setup, command):
    """Every chunk of it reads, so nothing is dropped; the pack itself must still be rewritten."""
    setup.repo.gc(grace_seconds=0)  # one pack, nothing to drop: a plain repack would skip it
    assert len(list((setup.repo.git_dir / "chunks/packs").glob("*.pack"))) == 1
    pack = DAMAGE["pack-magic"](setup) + ".pack"
    root = setup.repo.root
    setup.repo.close()
    assert pack in _fsck(root).stdout
    invoke(*command, cwd=root, check=True)
    assert _fsck(root).returncode == 0
    assert not (root / ".mgit/chunks/packs" / pack).exists()
    with Repository(root) as fresh:
        fresh.checkout(setup.first)
        fresh.checkout("main")
    assert tree_hashes(root) == setup.files


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_repository_packed_by_git_gc_is_whole(setup):
    """`git gc` (a user's habit) packs objects and refs: fsck must still read every one."""
    root = setup.repo.root
    setup.repo.close()
    subprocess.run(["git", "--git-dir", str(root / ".mgit"), "gc", "-q"], check=True)
    assert (root / ".mgit" / "packed-refs").exists()
    proc = _fsck(root)
    assert proc.returncode == 0, proc.stdout


def test_repair_fetches_git_objects_and_refs_over_http(setup, tmp_path, monkeypatch):
    """The HTTP backend (``mgit serve``) serves a repair as the directory one does."""
    import threading

    from mgit.remote.server import MgitServer

    (tmp_path / "served").mkdir()
    server = MgitServer(tmp_path / "served", port=0, tokens={"token": "rw"})
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        monkeypatch.setenv("MGIT_TOKEN", "token")
        repo = setup.repo
        repo.remote_remove("origin")
        repo.remote_add("web", f"{server.url}/team/llama")
        repo.push("web")
        tree = _root_tree(setup)
        DAMAGE["tree-flip"](setup)
        (repo.git_dir / "logs/refs/heads/main").unlink()
        (repo.git_dir / "refs/remotes/web/main").unlink()  # only the server knows main now
        (repo.git_dir / "refs/heads/main").write_bytes(b"garbage\n")
        with Repository(repo.root) as damaged:
            report = damaged.fsck_repair()
            assert report.graph.objects == {tree: "web"} and report.graph.refs == {"refs/heads/main": "remote web"}
            assert damaged.fsck() == []
    finally:
        server.shutdown()
        server.server_close()


def test_lost_staged_statistics_are_dropped_from_the_index(setup):
    """They never leave the repository, so no remote can restore them; they are derived data."""
    from mgit.worktree.index import Index

    stats = Index.load(setup.repo.git_dir / "mgit-index.json").entries["model/model.safetensors"].stats
    assert stats is not None
    _cut(_loose(setup.repo, stats), 20)
    with Repository(setup.repo.root) as damaged:
        assert any(stats[:12] in p for p in damaged.fsck())
        report = damaged.fsck_repair()
        assert report.graph.index_stats == ["model/model.safetensors"] and report.graph.removed == [stats]
    with Repository(setup.repo.root) as fresh:
        assert fresh.fsck() == [] and fresh.status().unstaged == []


def test_an_emptied_packed_refs_gets_the_checked_out_branch_back_from_its_reflog(setup):
    """Every ref was packed, then the file lost its content: dulwich cannot read an empty one,
    and HEAD names a branch that no longer exists though its reflog does."""
    DAMAGE["packed-refs"](setup)
    (setup.repo.git_dir / "packed-refs").write_bytes(b"")
    root = setup.repo.root
    setup.repo.close()
    found = _fsck(root)
    assert found.returncode == 1 and "packed-refs is damaged: is empty" in found.stdout
    assert "ref HEAD is damaged: names refs/heads/main, which does not exist though its reflog does" in found.stdout
    repaired = invoke("fsck", "--repair", cwd=root)
    assert repaired.returncode == 0 and "restored: refs/heads/main from its reflog" in repaired.stderr, repaired.stderr
    with Repository(root) as fresh:
        assert fresh.refs.resolve("HEAD") == setup.second and fresh.refs.current_branch() == "main"
        fresh.checkout(setup.first)
        fresh.checkout("main")
    assert tree_hashes(root) == setup.files


def test_reflog_commands_name_a_damaged_reflog_and_repair_mends_it(setup):
    DAMAGE["reflog-line"](setup)
    root = setup.repo.root
    setup.repo.close()
    for command in (["reflog"], ["reflog", "expire", "--all"]):
        proc = invoke(*command, cwd=root)
        assert proc.returncode == 1 and proc.stderr.strip() == (
            "error: reflog logs/HEAD is damaged (line 3 cannot be read); run `mgit fsck --repair`"
        ), proc.stderr
    invoke("fsck", "--repair", cwd=root, check=True)
    assert len(invoke("reflog", cwd=root, check=True).stdout.strip().splitlines()) == 2
