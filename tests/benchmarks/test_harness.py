"""The benchmark harness (benchmarks/harness/): its pieces as pure functions, and every script's
command line. Fast and without timing: no benchmark runs here."""

from __future__ import annotations

import argparse
import hashlib
import importlib
import json
import os
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness import cli, machine, models, report  # noqa: E402
from harness.runner import (  # noqa: E402
    Proc,
    Result,
    RssSampler,
    Runner,
    best_of,
    checked_best_of,
    copy_repository,
)

SCRIPTS = [
    "bench_core",
    "bench_storage",
    "bench_diff",
    "bench_merge",
    "bench_remote",
    "bench_budget",
    "bench_scale",
    "bench_profile",
    "bench_opaque",
    "crash_points",
]


# -- report ---------------------------------------------------------------------------------


def test_table_renders_header_rule_and_rows() -> None:
    text = report.table(["tool", "time (s)"], "lr", [["mgit", "1.00"], ["cp -r", 2]])
    assert text == "| tool | time (s) |\n|---|---:|\n| mgit | 1.00 |\n| cp -r | 2 |"


def test_table_refuses_an_alignment_per_column_mismatch() -> None:
    with pytest.raises(ValueError):
        report.table(["a", "b"], "l", [])


def test_steps_table_keeps_the_core_layout() -> None:
    best = Proc(2.0, 100 * 10**6, 0.0, "", (1.5, 0.5))
    rows = [Result("mgit", "add + commit", best, [2.0, 2.5], store_bytes=7 * 10**7)]
    assert report.steps_table(rows, 10**8).splitlines() == [
        "| tool | step | wall time (s) | MB/s | store (GB) | store / raw | peak RSS (MB) | other load "
        "| byte-identical | all runs (s) | fastest run by command (s) |",
        "|---|---|---:|---:|---:|---:|---:|---:|---|---|---|",
        "| mgit | add + commit | 2.00 | 50 | 0.070 | 0.700 | 100 | 0% |  | 2.00 / 2.50 | 1.50 + 0.50 |",
    ]


def test_update_results_replaces_only_its_own_section(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\nintro\n\n## A (a.py)\n\nold a\n\n## B (b.py)\n\nb stays\n")
    report.update_results("## A (a.py)\n\nnew a\n", "## A (a.py)", page)
    assert page.read_text() == "# Benchmarks\n\nintro\n\n## A (a.py)\n\nnew a\n\n## B (b.py)\n\nb stays\n"
    report.update_results("## B (b.py)\n\nnew b\n", "## B (b.py)", page)
    assert page.read_text().endswith("## A (a.py)\n\nnew a\n\n## B (b.py)\n\nnew b\n")


def test_update_results_appends_a_new_section_and_creates_the_page(tmp_path: Path) -> None:
    page = tmp_path / "results" / "bench_c.md"
    report.update_results("## C (bench_c.py)\n\nc\n", "## C (bench_c.py)", page)
    intro = report.RESULTS_INTRO.format(script="bench_c")
    assert intro.startswith("# bench_c.py: raw runs") and page.read_text() == intro + "\n## C (bench_c.py)\n\nc\n"


def test_publish_writes_the_section_into_its_scripts_results_file(tmp_path: Path, monkeypatch, capsys) -> None:
    """--write-docs goes to benchmarks/results/<script>.md, never to docs/benchmarks.md (the summary)."""
    monkeypatch.setattr(report, "RESULTS_DIR", tmp_path)
    title = "## Light commands (bench_core.py --parts light)"
    assert report.results_file(title) == tmp_path / "bench_core.md"
    report.publish(f"{title}\n\nnumbers\n", title, write_docs=False)
    assert not (tmp_path / "bench_core.md").exists() and "numbers" in capsys.readouterr().out
    report.publish(f"{title}\n\nnumbers\n", title, write_docs=True)
    assert (tmp_path / "bench_core.md").read_text().endswith(f"\n{title}\n\nnumbers\n")
    with pytest.raises(ValueError, match="names no benchmark script"):
        report.results_file("## Something")


def test_every_results_file_is_where_its_script_publishes() -> None:
    """Each kept section sits in the file its title sends it to, and each file is a script's."""
    files = list(report.RESULTS_DIR.glob("*.md"))
    for path in files:
        titles = [line.rstrip() for line in path.read_text().splitlines() if line.startswith("## ")]
        assert titles and all(report.results_file(t) == path for t in titles), path
    scripts = {p.stem for p in (report.REPO_ROOT / "benchmarks").glob("bench_*.py")}
    assert files and {p.stem for p in files} <= scripts


def test_update_results_puts_a_new_section_right_after_the_one_named(tmp_path: Path) -> None:
    page = tmp_path / "benchmarks.md"
    page.write_text("# Benchmarks\n\n## A (a.py)\n\na\n\n## B (b.py)\n\nb\n")
    report.update_results("## A, some (a.py)\n\nsome a\n", "## A, some (a.py)", page, after="## A (a.py)")
    first = "# Benchmarks\n\n## A (a.py)\n\na\n\n## A, some (a.py)\n\nsome a\n\n## B (b.py)\n\nb\n"
    assert page.read_text() == first
    report.update_results("## A, some (a.py)\n\nnewer\n", "## A, some (a.py)", page, after="## A (a.py)")
    assert page.read_text() == first.replace("some a", "newer")  # replaced where it is, once
    report.update_results("## C (c.py)\n\nc\n", "## C (c.py)", page, after="## Z (z.py)")  # no such section
    assert page.read_text().endswith("## B (b.py)\n\nb\n\n## C (c.py)\n\nc\n")


def test_fmt_rss_shows_the_sampled_anonymous_peak_when_there_is_one() -> None:
    assert report.fmt_rss(Proc(1.0, 300 * 10**6, 0.0, "")) == "300"
    assert report.fmt_rss(Proc(1.0, 300 * 10**6, 0.0, "", peaks={"RssAnon": 120 * 10**6})) == "300 (120)"


# -- machine: the quiet-machine policy -------------------------------------------------------


@pytest.mark.parametrize(
    ("others", "busy", "waited", "limit", "decision"),
    [
        ([], None, 0.0, 60.0, "go"),  # nobody else
        (["python bench_x.py"], None, 0.0, 60.0, "wait"),  # not measured yet
        (["python bench_x.py"], 0.9, 10.0, 60.0, "wait"),  # busy: it is measuring
        (["python bench_x.py"], 0.01, 10.0, 60.0, "idle"),  # idle a whole poll: it waits itself
        (["python bench_x.py"], 0.9, 60.0, 60.0, "go"),  # waited long enough
        (["python bench_x.py"], None, 0.0, 0.0, "go"),  # no waiting asked for
    ],
)
def test_other_benchmark_decision(others: list[str], busy: float | None, waited: float, limit: float, decision: str):
    assert machine.other_benchmark_decision(others, busy, waited, limit) == decision


def test_benchmark_lines_skip_this_process_its_ancestors_and_descendants() -> None:
    # 1 init; 10 shell → 11 timeout → 12 this benchmark → 13 its mgit; 20 another benchmark → 21 its child
    parents = {10: 1, 11: 10, 12: 11, 13: 12, 20: 1, 21: 20, 30: 1}
    argv = {
        10: ["bash"],
        11: ["timeout", "600", "python", "benchmarks/bench_core.py"],
        12: ["python", "benchmarks/bench_core.py", ""],
        13: ["python", "-m", "mgit", "add", "model"],
        20: ["python", "benchmarks/bench_merge.py", "--quick", ""],
        21: ["python", "-c", "from bench_merge import compare_main"],
        30: ["vim", "bench_notes.txt"],
    }
    assert machine.benchmark_lines(parents, argv, 12) == ["python benchmarks/bench_merge.py --quick"]


CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 23
model\t\t: 49
model name\t: AMD EPYC
flags\t\t: fpu sse4_2 avx avx2 bmi2

processor\t: 1
model name\t: another
"""


def test_the_cpu_label_names_family_model_and_simd_of_the_first_processor() -> None:
    fields = machine.cpuinfo_fields(CPUINFO)
    assert fields["model name"] == "AMD EPYC"
    assert machine.cpu_label(fields) == "AMD EPYC, family 23 model 49, AVX2"
    assert machine.cpu_label({"Model name": "Neoverse", "Features": "fp asimd"}) == "Neoverse, NEON"


@pytest.mark.parametrize(
    ("flags", "level"),
    [
        ({"avx2", "avx512f", "avx"}, "AVX-512"),
        ({"avx", "avx2"}, "AVX2"),
        ({"sse4_2"}, "SSE4.2"),
        (set(), "no SIMD flags"),
    ],
)
def test_simd_level_is_the_widest_flag(flags: set[str], level: str) -> None:
    assert machine.simd_level(flags) == level


def test_core_rates_measure_each_operation_and_the_report_shows_them() -> None:
    rates = machine.core_rates(nbytes=2**20, reps=1)
    assert list(rates) == ["zstd decompress", "BLAKE3", "memcpy"]
    assert all(0 < r < float("inf") for r in rates.values())
    line = machine.rates_line({"zstd decompress": 1.234, "BLAKE3": 3.0, "memcpy": 7.5})
    assert line.endswith("zstd decompress 1.23, BLAKE3 3.00, memcpy 7.50")


# -- runner ---------------------------------------------------------------------------------


def test_runner_returns_the_output_and_fails_loudly(tmp_path: Path) -> None:
    runner = Runner({"PATH": "/usr/bin:/bin"}, idle_wait=0)
    assert runner.run(["sh", "-c", "echo hi; echo err >&2"], tmp_path).output == "hi\nerr\n"
    with pytest.raises(RuntimeError, match=r"exit 3.*\nboom"):
        runner.run(["sh", "-c", "echo boom; exit 3"], tmp_path)
    steps = runner.steps([["true"], ["true"]], tmp_path)
    assert len(steps.parts) == 2 and steps.peaks == {}


def test_best_of_prepares_each_run_and_keeps_the_fastest() -> None:
    seconds = iter([3.0, 1.0, 2.0])
    prepared = []
    best, times = best_of(3, lambda: prepared.append(1), lambda: Proc(next(seconds), 0, 0.0, ""))
    assert (best.seconds, times, len(prepared)) == (1.0, [3.0, 1.0, 2.0], 3)


def test_checked_best_of_reports_a_run_that_left_other_bytes(tmp_path: Path) -> None:
    """One checkout of three writing the wrong bytes makes the step not byte-identical, though its
    fastest run was right: a fast wrong checkout is no result."""
    tree = tmp_path / "model"
    tree.mkdir()
    written = iter([b"ok", b"bad", b"ok"])
    seconds = iter([2.0, 3.0, 1.0])

    def measure() -> Proc:
        (tree / "w.bin").write_bytes(next(written))
        return Proc(next(seconds), 0, 0.0, "")

    sums = {"w.bin": hashlib.sha256(b"ok").hexdigest()}
    result = checked_best_of("mgit", "checkout", 3, lambda: None, measure, tree, sums)
    assert (result.best.seconds, result.times, result.identical) == (1.0, [2.0, 3.0, 1.0], False)
    written, seconds = iter([b"ok"] * 2), iter([1.0, 1.0])
    assert checked_best_of("mgit", "checkout", 2, lambda: None, measure, tree, sums).identical is True


def test_the_zipnn_worker_runs_in_another_python_by_its_own_import(tmp_path: Path) -> None:
    """The worker is started as ``python -c WORKER BENCH_DIR OUT FILE...`` in the baselines' environment
    (no script of its own); with a stand-in zipnn (zlib) it records each file's size and round trip."""
    from harness import zipnn

    fake = tmp_path / "fake"
    fake.mkdir()
    (fake / "zipnn.py").write_text(
        "import zlib\n"
        "class ZipNN:\n"
        "    def __init__(self, **options): pass\n"
        "    def compress(self, data): return zlib.compress(bytes(data))\n"
        "    def decompress(self, data): return zlib.decompress(data)\n"
    )
    shard = tmp_path / "model-1.safetensors"
    shard.write_bytes(bytes(range(256)) * 100)
    out = tmp_path / "sizes.json"
    cmd = [sys.executable, "-c", zipnn.WORKER, str(zipnn.BENCH_DIR), str(out), str(shard)]
    subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(fake)}, cwd=tmp_path, check=True)
    got = json.loads(out.read_text())[str(shard)]
    assert got["roundtrip"] is True and got["bytes"] == len(zlib.compress(shard.read_bytes()))


# -- cli ------------------------------------------------------------------------------------


def test_common_options_and_defaults() -> None:
    p = argparse.ArgumentParser()
    cli.add_common(p, workdir="bench-work/x", size_gb=0.5, quick="tiny", reps=(3, "runs"), other_wait=60, keep="keep")
    args = p.parse_args([])
    assert args.workdir.parts[-2:] == ("bench-work", "x")
    assert (args.size_gb, args.quick, args.reps, args.idle_wait, args.other_wait) == (0.5, False, 3, 120, 60)
    assert (args.mgit_rev, args.keep, args.write_docs) == ("HEAD", False, False)
    args = p.parse_args(["--quick", "--reps", "1", "--idle-wait", "0", "--keep", "--write-docs", "--mgit-rev", "w"])
    assert (args.quick, args.reps, args.idle_wait, args.keep, args.write_docs, args.mgit_rev) == (
        True,
        1,
        0,
        True,
        True,
        "w",
    )


def test_options_a_script_lacks_are_not_offered() -> None:
    p = argparse.ArgumentParser()
    cli.add_common(p, workdir="w", idle_wait=False, mgit_rev=False)
    with pytest.raises(SystemExit):
        p.parse_args(["--reps", "2"])
    assert not hasattr(p.parse_args([]), "idle_wait")


def test_command_line_names_the_script_for_main_argv() -> None:
    assert cli.command_line(["--quick", "a b"], "benchmarks/bench_x.py") == "python benchmarks/bench_x.py --quick 'a b'"


def test_free_disk_check_says_what_it_needs(tmp_path: Path) -> None:
    assert cli.disk_shortfall(10 * 10**9, 4 * 10**9) is None
    assert cli.disk_shortfall(1 * 10**9, 4 * 10**9) == "needs about 4.0 GB free, has 1.0 GB"
    cli.check_free_disk(tmp_path / "not" / "yet", 1)  # a missing workdir: its nearest parent's disk
    with pytest.raises(SystemExit, match=r"not enough disk in .*: this run needs about .* GB free, has"):
        cli.check_free_disk(tmp_path, 10**18)


# -- models ---------------------------------------------------------------------------------


def test_the_model_plan_fits_the_size_and_splits_into_shards() -> None:
    plan = models.plan_model(int(0.1 * models.GB))
    assert 0.05 * models.GB < plan.nbytes < 0.15 * models.GB
    parts = models.split_shards(plan.tensors, models.SHARDS)
    assert 1 <= len(parts) <= models.SHARDS
    assert [t for part in parts for t in part] == plan.tensors
    header = models.safetensors_header(parts[0])
    assert len(header) % 8 == 0 and header.startswith(b'{"__metadata__"')


# -- the scripts ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_script_imports_and_answers_help(name: str, capsys: pytest.CaptureFixture[str]) -> None:
    module = importlib.import_module(name)
    entry = module.parse_args if hasattr(module, "parse_args") else module.main
    with pytest.raises(SystemExit) as exc:
        entry(["--help"])
    assert exc.value.code == 0
    assert "usage:" in capsys.readouterr().out


def test_no_script_imports_another() -> None:
    for name in SCRIPTS:
        text = (BENCH_DIR / f"{name}.py").read_text()
        others = [s for s in SCRIPTS if s != name]
        assert not [s for s in others if f"import {s}" in text or f"from {s} import" in text], name


def test_bench_diff_keeps_its_old_wait_option() -> None:
    bench_diff = importlib.import_module("bench_diff")
    assert bench_diff.parse_args([]).other_wait == 1800
    assert bench_diff.parse_args(["--bench-wait", "5"]).other_wait == 5


def test_the_sampler_follows_a_command_started_right_after_it():
    """The timed command starts at once after the sampler (the runner's order): it must still be
    the process sampled (before, the sampler's thread could list it among the earlier children and
    report no peaks, so a merge table lost its anonymous-memory figures)."""
    grab = "import time; x = bytearray(60_000_000); x[::4096] = b'1' * len(x[::4096]); time.sleep(0.6)"
    with RssSampler(interval=0.02) as sampler:
        subprocess.run([sys.executable, "-c", grab], check=True)
    assert sampler.peaks["RssAnon"] > 50_000_000, sampler.peaks


def test_a_repository_copy_shares_its_packs_and_stays_independent(tmp_path: Path) -> None:
    import mgit

    src = tmp_path / "src"
    repo = mgit.Repository.init(src)
    (src / "w.bin").write_bytes(bytes(range(256)) * 40_000)
    repo.add(["w.bin"])
    repo.commit("one")
    dst = copy_repository(src, tmp_path / "dst")
    packs = sorted((src / ".mgit" / "chunks" / "packs").iterdir())
    assert packs and all(os.path.samefile(p, dst / ".mgit" / "chunks" / "packs" / p.name) for p in packs)
    index = dst / ".mgit" / "mgit-index.json"
    assert not os.path.samefile(src / ".mgit" / "mgit-index.json", index)  # rewritten in place of a link
    assert not os.path.samefile(src / "w.bin", dst / "w.bin")
    copy = mgit.Repository(dst)
    (dst / "w.bin").write_bytes(bytes(range(255, -1, -1)) * 40_000)
    copy.add(["w.bin"])
    copy.commit("two")
    assert (src / "w.bin").read_bytes() == bytes(range(256)) * 40_000
    assert [p.name for p in sorted((src / ".mgit" / "chunks" / "packs").iterdir())] == [p.name for p in packs]
    assert mgit.Repository(src).log()[0].message.strip() == "one"
    assert mgit.Repository(dst).log()[0].message.strip() == "two"


def test_experts_written_alone_are_the_same_as_written_together(tmp_path: Path) -> None:
    """Regenerating experts 3..4 of a cache gives experts 3 and 4, not 1 and 2 again (a full run once
    merged experts 9..16 that were copies of 1..8, so mgit read half of what mergekit read)."""
    from harness import variants

    plan = models.plan_layers(models.SHAPES[-1], 1)
    base = tmp_path / "base"
    models.write_model(base, plan, 1)
    together = [tmp_path / "all" / f"expert-{k}" for k in range(1, 5)]
    variants.write_experts(base, together, plan)
    alone = [tmp_path / "some" / f"expert-{k}" for k in (3, 4)]
    variants.write_experts(base, alone, plan)
    digests = {d.name: variants.sha256_files(d) for d in together}
    assert {d.name: variants.sha256_files(d) for d in alone} == {k: digests[k] for k in ("expert-3", "expert-4")}
    assert len({str(v) for v in digests.values()}) == 4


def test_an_exported_mgit_is_the_one_measured_even_from_the_repository_root(tmp_path):
    """``python -m`` and ``-c`` put the current directory first on sys.path: run from this
    repository's root, the working tree's mgit used to shadow the exported commit."""
    from harness.tools import REPO_ROOT, mgit_command, python_prefix, script_child

    mgit, where = mgit_command(tmp_path, "HEAD")
    assert where.startswith("commit ")
    show = "import mgit; print(mgit.__file__)"
    for cmd in ([*python_prefix(mgit), "-c", show], script_child(mgit, show)):
        out = subprocess.run(cmd, cwd=REPO_ROOT, capture_output=True, text=True, check=True).stdout.strip()
        assert Path(out).resolve().is_relative_to(tmp_path.resolve()), out
    version = subprocess.run([*mgit, "--version"], cwd=REPO_ROOT, capture_output=True, text=True, check=True)
    assert "version" in version.stdout
