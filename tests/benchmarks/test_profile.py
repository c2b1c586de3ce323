"""The profile reader: py-spy's raw stacks sorted into the steps a merge or an ingest spends time on."""

from __future__ import annotations

import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness.profile import OTHER, Profile, classify, profile_table, record_command, step_of  # noqa: E402

ROOT = "_run_module_as_main (<frozen runpy>:198);<module> (mgit/__main__.py:5);merge (mgit/ops/merge.py:95)"
WORKER = "Thread._bootstrap (threading.py:1002);_worker (concurrent/futures/thread.py:83);one (mgit/model/ingest.py:99)"
DECODE = (
    "read (mgit/merge/engine.py:330);ChunkStore.get (mgit/store/chunkstore.py:330);"
    "decode_verified (mgit/store/record.py:180)"
)

RAW = "\n".join(
    [
        f"{ROOT};_find_and_load (<frozen importlib._bootstrap>:1176);<module> (torch/__init__.py:1) 30",
        f"{WORKER};{DECODE};decode (mgit/store/codec.py:147);inflate (mgit/store/codec.py:120) 20",
        f"{WORKER};{DECODE};decode (mgit/store/codec.py:147);ungroup_bytes (mgit/store/codec.py:70) 5",
        f"{WORKER};{DECODE};chunk_id (mgit/store/record.py:40) 4",
        f"{WORKER};read (mgit/merge/engine.py:340);merge_one (mgit/merge/engine.py:120);"
        "TaskArithmetic.combine (mgit/merge/methods/task_arithmetic.py:240) 25",
        f"{WORKER};chunk_id (mgit/store/record.py:40) 6",
        f"{WORKER};chunk_stats (mgit/model/stats.py:150) 3",
        f"{WORKER};ChunkStore.put (mgit/store/chunkstore.py:160);stats_against (mgit/model/stats.py:275);"
        "dot (mgit/model/stats.py:162) 4",
        f"{WORKER};ChunkStore.put (mgit/store/chunkstore.py:160);encode_delta (mgit/store/codec.py:100) 8",
        f"{WORKER};ChunkStore.put (mgit/store/chunkstore.py:160);PackWriter._write (mgit/store/pack.py:90) 2",
        f"{WORKER};Ingestor._chunks (mgit/model/ingest.py:120) 3",
        "garbage line without a count",
        "",
    ]
)


def test_every_sample_goes_to_one_step():
    counts = classify(RAW)
    assert counts == {
        "start-up (imports)": 30,
        "decode (zstd)": 20,
        "decode (un-group, undo delta)": 5,
        "verify (BLAKE3 of decoded chunks)": 4,
        "math (merge method)": 25,
        "hash (BLAKE3 of new chunks)": 6,
        "statistics (L2, max)": 7,
        "encode (delta, group, zstd)": 8,
        "write (store, working tree)": 2,
        OTHER: 3,
    }


def test_the_decoder_of_either_revision_is_recognised():
    decode = ["decode_verified (mgit/store/record.py:1)", "decode (mgit/store/codec.py:190)"]
    assert step_of([*decode, "_inflate_into (mgit/store/codec.py:129)"]) == "decode (zstd)"
    assert step_of([*decode, "_ungroup_into (mgit/store/codec.py:160)"]) == "decode (un-group, undo delta)"
    assert step_of([*decode, "_xor_into (mgit/store/codec.py:177)"]) == "decode (un-group, undo delta)"
    encode = ["ChunkStore.put (mgit/store/chunkstore.py:160)", "encode_delta (mgit/store/codec.py:80)"]
    assert step_of([*encode, "_xor_prefix (mgit/store/codec.py:70)"]) == "encode (delta, group, zstd)"
    assert step_of([*decode, "_undiff_into (mgit/store/codec.py:201)"]) == "decode (un-group, undo delta)"
    diff = ["ChunkStore.put (mgit/store/chunkstore.py:160)", "encode_diff (mgit/store/codec.py:120)"]
    assert step_of([*diff, "_zigzag_diff (mgit/store/codec.py:100)"]) == "encode (delta, group, zstd)"


def test_a_chunk_id_is_verification_only_under_a_decode():
    assert step_of(["x (mgit/model/ingest.py:1)", "chunk_id (mgit/store/record.py:40)"]).startswith("hash")
    assert step_of(["decode_verified (mgit/store/record.py:1)", "chunk_id (mgit/store/record.py:40)"]).startswith(
        "verify"
    )


def test_the_table_shows_seconds_shares_and_cores():
    profile = Profile(wall_s=0.5, samples=classify(RAW), rate=100)
    assert abs(profile.busy_s - 1.1) < 1e-9 and abs(profile.cores_used() - 2.2) < 1e-9
    header, rows = profile_table([("exact", profile)])
    assert header == ["step", "exact"]
    by_step = {r[0]: r[1] for r in rows}
    assert by_step["math (merge method)"] == "0.2 s (23%)"
    assert by_step["share of two cores used"] == "110%"
    assert rows[0][0] == "start-up (imports)"


def test_the_record_command_samples_every_thread_without_stopping_it(tmp_path):
    cmd = record_command(Path("/venv/bin/py-spy"), ["mgit", "merge"], tmp_path / "raw.txt", rate=50)
    assert cmd[:2] == ["/venv/bin/py-spy", "record"] and "--nonblocking" in cmd
    assert cmd[cmd.index("--") + 1 :] == ["mgit", "merge"]
