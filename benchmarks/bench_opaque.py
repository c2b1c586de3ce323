"""Opaque-file benchmark: what a new version of a large non-tensor file costs to store, two mgit revisions side by side.

Why: a GGUF (or a pickled checkpoint) is one opaque file to mgit. Cut every 4 MiB with no delta
base, a one-row change of a 10.5 MB GGUF stored 4.2 MB anew and an 8-byte insertion near its
start stored the whole file again; cut where its content says and stored as patch deltas
against the parent version's chunks (format 4), both should cost about the edit. Content-defined
cutting must not make adding a large file much slower. This script checks both, for two mgit
revisions (``--revs BEFORE,AFTER``, e.g. the commit before the change and the one after), in one run:

1. generate a GGUF-like file (``--gguf-mb``, default 10.5 MB: magic, a metadata header, then
   Q4_0-like blocks of an fp16 scale and 16 bytes of random 4-bit weights per 32 weights), its
   two edits — (a) one row of 4096 weights rewritten in place, (b) 8 bytes inserted at offset
   100, in the header — and a file of random bytes (``--random-mb``, default 100 MB);
2. per revision, in a fresh repository: add + commit the GGUF, then edit (a), then edit (b), each
   staged with ``mgit add --json`` (its ``stored_bytes``: what the version newly cost) and
   committed; ``mgit diff --stat HEAD~1 HEAD`` after each (what it counts for the file);
3. per revision, time ``mgit add`` of the random file in a fresh repository, ``--reps`` times
   after the quiet-machine policy (the fastest reported, all shown);
4. print a Markdown table and, with ``--write-docs``, replace this benchmark's section of
   benchmarks/results/bench_opaque.md.

Warm page cache (the files were just written). MB = 10^6 bytes.
"""

from __future__ import annotations

import json
import shutil
import sys
import time
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from harness import cli
from harness.models import MB
from harness.report import header_lines, publish, table, took
from harness.runner import Runner, best_of, fresh_dir
from harness.tools import mgit_command, mgit_label, tool_env

SECTION_TITLE = "## Opaque files (bench_opaque.py)"
ROW_WEIGHTS = 4096  # weights of one row of the quantized matrix
BLOCK = 32  # weights per Q4_0 block: an fp16 scale and 16 bytes of 4-bit weights
BLOCK_BYTES = 2 + BLOCK // 2
INSERT_AT, INSERTED = 100, b"8 bytes!"


def q4_blocks(count: int, seed: int) -> bytes:
    """``count`` Q4_0-like blocks: an fp16 scale, then 16 bytes of random 4-bit weights."""
    rng = np.random.default_rng(seed)
    scales = (rng.standard_normal(count) * 0.01).astype(np.float16).view(np.uint8).reshape(count, 2)
    nibbles = rng.integers(0, 256, (count, BLOCK // 2), dtype=np.uint8)
    return np.concatenate([scales, nibbles], axis=1).tobytes()


def gguf_like(size: int) -> bytes:
    """Magic and version, a metadata header, then Q4_0-like blocks, ``size`` bytes in all."""
    header = b"GGUF\x03\x00\x00\x00" + b"".join(f"tokenizer.ggml.tokens.{i}=token{i};".encode() for i in range(200))
    body = q4_blocks((size - len(header)) // BLOCK_BYTES, seed=0)
    return header + body + bytes(size - len(header) - len(body))


def versions(size: int) -> list[tuple[str, bytes]]:
    """(label, bytes) of the GGUF and its two edits, each on top of the one before."""
    base = gguf_like(size)
    row = ROW_WEIGHTS // BLOCK * BLOCK_BYTES
    at = (len(base) // 2) // row * row  # a row in the middle of the blocks
    new_row = q4_blocks(ROW_WEIGHTS // BLOCK, seed=1)
    one_row = base[:at] + new_row + base[at + row :]
    inserted = one_row[:INSERT_AT] + INSERTED + one_row[INSERT_AT:]
    return [
        ("v1: the file", base),
        (f"(a) one row ({row} bytes) rewritten", one_row),
        (f"(b) {len(INSERTED)} bytes inserted at offset {INSERT_AT}", inserted),
    ]


def stat_line(output: str) -> str:
    """The file's line of `mgit diff --stat`, without the path."""
    line = next((x for x in output.splitlines() if "model.gguf |" in x), "")
    return line.split("|", 1)[1].strip() if line else "(no line)"


def storage_rows(runner: Runner, mgit: list[str], label: str, work: Path, edits: list[tuple[str, bytes]]) -> list[list]:
    """Per version: what `add` newly stored and what `diff --stat` says, for one mgit."""
    repo = fresh_dir(work / "gguf")
    runner.run([*mgit, "init", "-q"], repo)
    rows = []
    for n, (what, data) in enumerate(edits):
        (repo / "model.gguf").write_bytes(data)
        added = json.loads(runner.run([*mgit, "add", "model.gguf", "--json", "-q"], repo).output)
        runner.run([*mgit, "commit", "-q", "-m", what], repo)
        stat = stat_line(runner.run([*mgit, "diff", "--stat", "HEAD~1", "HEAD"], repo).output) if n else ""
        rows.append([label, what, f"{len(data):,}", f"{added['stored_bytes']:,}", stat])
    return rows


def time_add(runner: Runner, mgit: list[str], work: Path, data: Path, reps: int) -> tuple[float, list[float]]:
    repo = work / "random"

    def prepare() -> None:
        fresh_dir(repo)
        runner.run([*mgit, "init", "-q"], repo)
        shutil.copyfile(data, repo / "random.bin")

    best, times = best_of(reps, prepare, lambda: runner.run([*mgit, "add", "random.bin", "-q"], repo, timed=True))
    return best.seconds, times


def parse_args(argv: Sequence[str] | None) -> object:
    p = cli.parser(__doc__ or "")
    p.add_argument("--revs", required=True, help="BEFORE,AFTER: the two mgit revisions (commits, or 'worktree')")
    p.add_argument("--gguf-mb", type=float, default=10.5, help="the GGUF-like file's size in MB; default 10.5")
    p.add_argument("--random-mb", type=float, default=100, help="the random file's size in MB; default 100")
    cli.add_common(p, workdir="bench-work/opaque", reps=(3, "runs of each timed add; default 3"), mgit_rev=False)
    return p.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> None:
    args = parse_args(argv)
    start = time.perf_counter()
    work = fresh_dir(args.workdir)
    runner = Runner(tool_env(work), idle_wait=args.idle_wait)
    edits = versions(int(args.gguf_mb * MB))
    random_file = work / "random.bin"
    random_file.write_bytes(np.random.default_rng(2).integers(0, 256, int(args.random_mb * MB), np.uint8).tobytes())
    rows, adds, labels = [], [], {}
    for rev in args.revs.split(","):
        mgit, where = mgit_command(work, rev)
        label = rev[:12]
        labels[f"mgit {label}"] = mgit_label(mgit, where)
        rows += storage_rows(runner, mgit, label, work, edits)
        best, times = time_add(runner, mgit, work, random_file, args.reps)
        adds.append([label, f"{best:.2f}", ", ".join(f"{t:.2f}" for t in times), f"{args.random_mb / best:.0f}"])
    command = cli.command_line(argv, "benchmarks/bench_opaque.py")
    lines = header_lines(SECTION_TITLE, command, work, labels, took(time.perf_counter() - start, runner.waited))
    section = "\n".join(
        [
            *lines,
            "What each version of a GGUF-like file newly cost to store (`mgit add --json`'s `stored_bytes`) and",
            "what `mgit diff --stat HEAD~1 HEAD` says of it:",
            "",
            table(["mgit", "version", "bytes", "stored anew", "diff --stat"], "llrrl", rows),
            "",
            f"`mgit add` of {args.random_mb:g} MB of random bytes (fresh repository, warm page cache), seconds:",
            "",
            table(["mgit", "best", "all runs", "MB/s"], "lrlr", adds),
            "",
        ]
    )
    publish(section, SECTION_TITLE, args.write_docs)


if __name__ == "__main__":
    sys.exit(main())
