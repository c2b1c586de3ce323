"""The stat cache against the filesystem's own clock (mgit/worktree/clock.py): the files a
command just wrote or read are trusted by the next command without being hashed again, a
write after a stat was recorded is never missed whatever the timestamp granularity, and
indexes written before the clock existed keep their 2 s rule."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from types import SimpleNamespace

import pytest
from helpers.models import frozen_finetune, llama_state_dict, write_model

import mgit.ops.workfiles as workfiles_mod
import mgit.worktree.status as status_mod
from mgit.graph.snapshot import Entry
from mgit.worktree import clock
from mgit.worktree.clock import Reading
from mgit.worktree.index import RACY_NS, Index, IndexEntry, StatKey

TICK = 2_000_000_000  # FAT's timestamp granularity


@pytest.fixture(autouse=True)
def patient(monkeypatch) -> None:
    """Re-hashing is priced so that waiting for the clock to tick past the files just written
    always pays (up to MAX_WAIT_NS), as it does for a multi-GB model: these tests then hold
    however coarse this machine's clock is. (By default a small file stamped in the clock's
    current tick is hashed once more instead; a multigrain filesystem needs no wait.)"""
    monkeypatch.setattr(clock, "NS_PER_BYTE", 10**9)


@pytest.fixture
def hashed(monkeypatch) -> list[str]:
    """Paths whose working file was compared by content, in call order."""
    calls: list[str] = []
    real = status_mod.working_matches

    def spy(graph, pool, path, rel, entry):
        calls.append(rel)
        return real(graph, pool, path, rel, entry)

    monkeypatch.setattr(status_mod, "working_matches", spy)
    monkeypatch.setattr(workfiles_mod, "working_matches", spy)
    return calls


def _commit(repo, sd: dict, message: str) -> str:
    """Write, add and commit a model (no timestamps moved: the cache must cope by itself)."""
    write_model(repo.root / "model", sd)
    repo.add(["model"])
    return repo.commit(message)


@pytest.fixture
def branches(repo):
    """main: a base model; tuned: a fine-tune of it; main checked out."""
    base = llama_state_dict(seed=5)
    _commit(repo, base, "base")
    repo.checkout(create_branch="tuned")
    _commit(repo, frozen_finetune(base, {0}, seed=50), "tuned")
    repo.checkout("main")
    return repo


def _stat(size=100, mtime=10 * TICK, ctime=10 * TICK, ino=7, dev=1) -> SimpleNamespace:
    return SimpleNamespace(st_size=size, st_mtime_ns=mtime, st_ctime_ns=ctime, st_ino=ino, st_dev=dev)


ENTRY = Entry("blob", "0" * 40)


# --- the next command trusts what this one recorded -------------------------------------


def test_status_right_after_add_hashes_nothing(repo, hashed):
    write_model(repo.root / "model", llama_state_dict(seed=1))
    repo.add(["model"])
    assert repo.status().unstaged == []
    assert hashed == []  # old rule: every file was written < 2 s before its record: all re-hashed


def test_status_right_after_checkout_hashes_nothing(branches, hashed):
    written = branches.checkout("tuned").written
    assert "model/model.safetensors" in written
    assert branches.status().clean
    assert hashed == []


def test_merge_right_after_checkout_reads_no_working_file(branches, hashed):
    """The merge checks the working tree is clean (inspect.refuse_dirty) from the stat cache
    alone, and the files it writes are trusted by the next command."""
    branches.checkout("main")
    branches.merge(["tuned"], "task_arithmetic", weight=0.5)
    assert hashed == []
    assert branches.status().clean
    assert hashed == []


def test_a_racy_file_is_hashed_once_then_trusted(repo, hashed, monkeypatch):
    """A file stamped in the marker's own tick is hashed by the next command, whose refresh
    makes the one after trust it."""
    write_model(repo.root / "model", llama_state_dict(seed=2))
    monkeypatch.setattr(clock, "MAX_WAIT_NS", 0)  # no waiting for the tick to pass
    real_read = clock.read
    files = [repo.root / "model" / "model.safetensors", repo.root / "model" / "config.json"]
    tick = min(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in files)  # both files stamped in it
    monkeypatch.setattr(clock, "read", lambda git_dir: Reading(tick, real_read(git_dir).dev))
    repo.add(["model"])
    assert all(e.marker_ns == tick for e in repo._index().entries.values())
    monkeypatch.setattr(clock, "read", real_read)
    assert repo.status().unstaged == []
    assert sorted(hashed) == ["model/config.json", "model/model.safetensors"]
    hashed.clear()
    assert repo.status().unstaged == []
    assert hashed == []


def test_a_content_check_by_another_command_refreshes_the_cache(repo, hashed, monkeypatch):
    """A racy file that a checking command (here ``reset --hard``, through workfiles.clean)
    finds unchanged by content gets its stat refreshed, so the next command trusts it."""
    write_model(repo.root / "model", llama_state_dict(seed=9))
    monkeypatch.setattr(clock, "MAX_WAIT_NS", 0)
    real_read = clock.read
    files = [repo.root / "model" / "model.safetensors", repo.root / "model" / "config.json"]
    tick = min(max(p.stat().st_mtime_ns, p.stat().st_ctime_ns) for p in files)
    monkeypatch.setattr(clock, "read", lambda git_dir: Reading(tick, real_read(git_dir).dev))
    repo.add(["model"])
    repo.commit("base")
    monkeypatch.setattr(clock, "read", real_read)
    assert repo.reset("HEAD", "hard").written == []
    assert sorted(hashed) == ["model/config.json", "model/model.safetensors"]
    hashed.clear()
    assert repo.status().clean
    assert hashed == []


def test_a_racy_checkout_file_waits_for_the_tick_when_hashing_costs_more(branches, monkeypatch):
    """After writing, the index's save reads the clock until it is past the files written,
    for no longer than re-hashing them would take; then it trusts them."""
    real_read = clock.read
    calls: list[int] = []

    def late(git_dir):  # the first two readings fall in the tick of the files just written
        calls.append(1)
        reading = real_read(git_dir)
        return reading if len(calls) > 2 else Reading(0, reading.dev)

    monkeypatch.setattr(clock, "read", late)
    branches.checkout("tuned")
    assert len(calls) >= 3  # a coarse clock may take a few more
    st = os.stat(branches.root / "model" / "model.safetensors")
    assert branches._index().entries["model/model.safetensors"].matches(st)
    calls.clear()
    monkeypatch.setattr(clock, "NS_PER_BYTE", 0)  # hashing is cheap: no wait, racy
    branches.checkout("main")
    assert len(calls) == 2  # the first reading, and one more at once
    st = os.stat(branches.root / "model" / "model.safetensors")
    assert not branches._index().entries["model/model.safetensors"].matches(st)


# --- a write after the record is never missed --------------------------------------------


def _overwrite_same_size(path: Path) -> None:
    """Rewrite the file in place with other bytes of the same size, its mtime put back."""
    st = path.stat()
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    with open(path, "r+b") as f:
        f.write(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


def test_a_same_size_overwrite_right_after_add_is_seen(repo):
    write_model(repo.root / "model", llama_state_dict(seed=3))
    repo.add(["model"])
    _overwrite_same_size(repo.root / "model" / "model.safetensors")
    assert [(f.path, f.change) for f in repo.status().unstaged] == [("model/model.safetensors", "modified")]


def test_a_same_size_overwrite_right_after_checkout_is_seen(branches):
    branches.checkout("tuned")
    _overwrite_same_size(branches.root / "model" / "model.safetensors")
    assert [(f.path, f.change) for f in branches.status().unstaged] == [("model/model.safetensors", "modified")]
    with pytest.raises(Exception, match="uncommitted"):
        branches.merge(["main"], "task_arithmetic", base="HEAD", weight=0.5)


def test_a_stat_in_the_markers_tick_is_racy():
    """On a 2 s filesystem (FAT) the file and the marker touched after its write share a
    tick: the entry is racy, since a same-size write in that tick would leave the stat equal."""
    st = _stat()
    same_tick = IndexEntry(ENTRY).with_stat(st, Reading(10 * TICK, 1))
    assert same_tick.marker_ns == 10 * TICK and not same_tick.matches(st)
    later = IndexEntry(ENTRY).with_stat(st, Reading(11 * TICK, 1))
    assert later.matches(st)
    assert not later.matches(_stat(mtime=11 * TICK, ctime=11 * TICK))  # any write after: stamped ≥ marker
    # mtime put back by hand: the ctime still moves
    assert not later.matches(_stat(ctime=11 * TICK))
    # a ctime in the marker's tick (or a future mtime): racy too
    for st in (_stat(ctime=11 * TICK), _stat(mtime=12 * TICK)):
        assert not IndexEntry(ENTRY).with_stat(st, Reading(11 * TICK, 1)).matches(st)


def test_a_file_on_another_filesystem_keeps_the_2s_rule():
    """A marker's time says nothing about another filesystem's clock (an NFS server's)."""
    st = _stat(dev=2)
    ie = IndexEntry(ENTRY).with_stat(st, Reading(11 * TICK, 1))
    assert ie.marker_ns is None
    assert not IndexEntry(ENTRY, ie.stat, 10 * TICK + RACY_NS).matches(st)
    assert IndexEntry(ENTRY, ie.stat, 10 * TICK + RACY_NS + 1).matches(st)


def test_the_same_tick_simulated_on_disk_is_re_hashed(repo, hashed, monkeypatch):
    """A coarse filesystem simulated: every marker reading falls in the tick of the files just
    written; nothing recorded then is trusted, and a same-size overwrite is found."""
    write_model(repo.root / "model", llama_state_dict(seed=4))
    monkeypatch.setattr(clock, "MAX_WAIT_NS", 0)
    real_read = clock.read
    path = repo.root / "model" / "model.safetensors"

    def coarse(git_dir):
        st = path.stat()
        return Reading(max(st.st_mtime_ns, st.st_ctime_ns), real_read(git_dir).dev)

    monkeypatch.setattr(clock, "read", coarse)
    repo.add(["model"])
    recorded = repo._index().entries["model/model.safetensors"]
    assert not recorded.matches(path.stat())  # racy
    _overwrite_same_size(path)
    assert [f.path for f in repo.status().unstaged] == ["model/model.safetensors"]
    assert "model/model.safetensors" in hashed


def test_a_file_changed_before_the_save_keeps_its_old_stat(repo, monkeypatch):
    """A stat recorded after a write (checkout) is re-taken after the reading when the index
    is saved; a file changed in between keeps the stat it had, so it is hashed again."""
    write_model(repo.root / "model", llama_state_dict(seed=6))
    path = repo.root / "model" / "config.json"
    index = repo._index()
    index.set("model/config.json", ENTRY, path.stat())
    assert index.unsettled == {"model/config.json"}
    path.write_text('{"changed": 1}')
    index.save()
    ie = Index.load(index.path).entries["model/config.json"]
    assert ie.marker_ns is None and not ie.matches(path.stat())


# --- indexes written before the clock ----------------------------------------------------


def _old_index(repo, rel: str, recorded_ns: int) -> None:
    """The index as mgit before the filesystem clock wrote it: no marker_ns."""
    st = (repo.root / rel).stat()
    obj = json.loads(repo._index().path.read_text())
    e = obj["entries"][rel]
    e["stat"] = {"size": st.st_size, "mtime_ns": st.st_mtime_ns, "ctime_ns": st.st_ctime_ns, "ino": st.st_ino}
    e["recorded_ns"] = recorded_ns
    e.pop("marker_ns", None)
    repo._index().path.write_text(json.dumps(obj, indent=0))


def test_an_index_written_by_older_mgit_keeps_its_2s_rule(repo, hashed):
    write_model(repo.root / "model", llama_state_dict(seed=7))
    repo.add(["model"])
    rel = "model/model.safetensors"
    st = (repo.root / rel).stat()
    _old_index(repo, rel, st.st_mtime_ns + RACY_NS + 1)  # recorded > 2 s after the file's write
    assert repo._index().entries[rel].marker_ns is None
    assert repo.status().unstaged == [] and hashed == []
    _old_index(repo, rel, time.time_ns())  # recorded right after: racy under the old rule
    assert repo.status().unstaged == [] and hashed == [rel]
    hashed.clear()
    assert repo._index().entries[rel].marker_ns is not None  # refreshed with the clock
    assert repo.status().unstaged == [] and hashed == []


def test_the_index_format_stays_readable_by_older_mgit(repo):
    """Same schema name and keys; marker_ns is one more key, which older readers ignore;
    recorded_ns keeps its meaning (our clock at the record), so their 2 s rule stays safe."""
    write_model(repo.root / "model", llama_state_dict(seed=8))
    before = time.time_ns()
    repo.add(["model"])
    obj = json.loads(repo._index().path.read_text())
    assert obj["schema"] == "mgit.index/1"
    for e in obj["entries"].values():
        assert {"kind", "oid", "mode", "stat", "recorded_ns", "skip_worktree", "stats"} <= set(e)
        assert set(e) - {"kind", "oid", "mode", "stat", "recorded_ns", "skip_worktree", "stats"} == {"marker_ns"}
        assert e["recorded_ns"] >= before and e["recorded_ns"] >= e["stat"]["mtime_ns"]
        assert e["marker_ns"] > max(e["stat"]["mtime_ns"], e["stat"]["ctime_ns"])
        StatKey(**e["stat"])  # the stat object as older readers build it: the same four fields


# --- the wait for the tick ----------------------------------------------------------------


def test_read_past_waits_only_while_hashing_would_cost_more(tmp_path, monkeypatch):
    monkeypatch.setattr(clock, "NS_PER_BYTE", 1)  # the default price: 1 GB/s
    readings = iter([5, 5, 5, 9, 9])
    monkeypatch.setattr(clock, "read", lambda git_dir: Reading(next(readings), 1))
    sleeps: list[float] = []
    monkeypatch.setattr(clock.time, "sleep", sleeps.append)
    assert clock.read_past(tmp_path, [(6, 10**9)]) == Reading(9, 1)  # 1 GB racy: worth ~1 s of waiting
    assert len(sleeps) == 2  # once at once, then two short pauses
    readings = iter([5, 5, 5, 9])
    sleeps.clear()
    assert clock.read_past(tmp_path, [(6, 10)]) == Reading(5, 1)  # 10 bytes: hashed again next time instead
    assert sleeps == []
    readings = iter([7])
    assert clock.read_past(tmp_path, [(6, 10**9)]) == Reading(7, 1)  # already past: one reading


def test_the_marker_lives_in_the_repository(repo):
    reading = clock.read(repo.git_dir)
    assert reading is not None and (repo.git_dir / clock.MARKER).is_file()
    assert reading.dev == os.stat(repo.root).st_dev
