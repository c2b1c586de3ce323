"""bench_scale.py and what it added to the harness: the /proc I/O counters of a run, the cold page cache,
the disk it needs, the chart, its arguments and runs; and one end-to-end run at a tiny size
(marked ``bench_smoke``). Counts bytes and calls, never times."""

from __future__ import annotations

import functools
import importlib
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness import cli, machine, models, plot, report, runner, scale_disk, scale_report  # noqa: E402
from harness.runner import Proc, Runner  # noqa: E402
from harness.targets import met_cell  # noqa: E402

bench_scale = importlib.import_module("bench_scale")
GB = models.GB
SVG = "{http://www.w3.org/2000/svg}"

# -- /proc/<pid>/io -------------------------------------------------------------------------

PROC_IO = """rchar: 4096
wchar: 123
syscr: 5
syscw: 2
read_bytes: 8192
write_bytes: 4096
cancelled_write_bytes: 0
"""


def test_parse_proc_io_keeps_the_byte_counters() -> None:
    assert runner.parse_proc_io(PROC_IO) == {
        "rchar": 4096,
        "wchar": 123,
        "read_bytes": 8192,
        "write_bytes": 4096,
        "cancelled_write_bytes": 0,
    }
    assert runner.parse_proc_io("") == {}
    assert runner.parse_proc_io("read_bytes: n/a\n") == {}


def test_read_proc_io_of_a_process_and_of_none() -> None:
    mine = runner.read_proc_io(os.getpid())
    assert set(mine) == set(runner.IO_FIELDS) and mine["rchar"] > 0
    assert runner.read_proc_io(2**22 + 12345) == {}  # no such process (above any pid_max default)


def on_tmpfs(path: Path) -> bool:
    return machine.filesystem(path) in ("tmpfs", "ramfs", "?")


def test_a_run_counts_the_bytes_its_process_and_children_wrote(tmp_path: Path) -> None:
    """The counters are the child's at exit, read before it is reaped: `sh` itself writes nothing,
    its children `head` and `sync` write 3 MB; they count because sh waited for them."""
    r = Runner({"PATH": "/usr/bin:/bin"}, idle_wait=0)
    proc = r.run(["sh", "-c", "head -c 3000000 /dev/zero > out.bin; sync; true"], tmp_path, timed=True)
    assert proc.io["wchar"] >= 3_000_000
    if not on_tmpfs(tmp_path):  # tmpfs pages are never written to a disk
        assert proc.disk_written is not None and proc.disk_written >= 3_000_000
    quiet = r.run(["true"], tmp_path)
    assert quiet.io["wchar"] < 1_000_000 and quiet.disk_written == quiet.io["write_bytes"]


def test_proc_without_counters_reports_none() -> None:
    p = Proc(1.0, 0, 0.0, "")
    assert p.disk_read is None and p.disk_written is None


def test_steps_add_the_io_of_their_commands(tmp_path: Path) -> None:
    r = Runner({"PATH": "/usr/bin:/bin"}, idle_wait=0)
    one = ["sh", "-c", "head -c 1000000 /dev/zero > a"]
    both = r.steps([one, one], tmp_path)
    assert both.io["wchar"] >= 2_000_000
    assert runner.add_io([{"wchar": 1, "read_bytes": 2}, {"wchar": 3, "read_bytes": 4}]) == {
        "wchar": 4,
        "read_bytes": 6,
    }
    assert runner.add_io([{"wchar": 1}, {}]) == {}  # one run's counters unreadable: none for the sum


# -- a cold page cache ----------------------------------------------------------------------


def test_can_drop_caches_needs_the_file_writable(tmp_path: Path) -> None:
    assert not machine.can_drop_caches(tmp_path / "missing")
    knob = tmp_path / "drop_caches"
    knob.write_text("")
    assert machine.can_drop_caches(knob)
    machine.drop_caches(knob)
    assert knob.read_text() == "3\n"


def test_a_cold_runner_drops_the_cache_before_each_timed_run_only(tmp_path: Path, monkeypatch) -> None:
    drops = []
    monkeypatch.setattr(machine, "drop_caches", lambda: drops.append(1))
    cold = Runner({"PATH": "/usr/bin:/bin"}, idle_wait=0, cold=True)
    cold.run(["true"], tmp_path)
    assert drops == []
    cold.run(["true"], tmp_path, timed=True)
    assert len(drops) == 1
    cold.steps([["true"], ["true"]], tmp_path)  # one measurement: cold before its first command only
    assert len(drops) == 2
    Runner({"PATH": "/usr/bin:/bin"}, idle_wait=0).run(["true"], tmp_path, timed=True)
    assert len(drops) == 2


# -- the disk it needs ----------------------------------------------------------------------


def plan(layers: int, shape: str = "tinyllama") -> models.ModelPlan:
    return models.plan_layers(models.NAMED_SHAPES[shape], layers)


def test_the_full_model_is_tinyllama_shaped() -> None:
    p = plan(bench_scale.LAYERS)
    s = p.shape
    assert (s.hidden, s.intermediate, s.vocab, p.layers) == (2048, 5632, 32000, 22)
    assert 2.1 * GB < p.nbytes < 2.3 * GB
    assert 0.4 * GB < plan(bench_scale.QUICK_LAYERS).nbytes < 0.6 * GB


def test_plan_model_by_size_is_unchanged() -> None:
    by_size = models.plan_model(int(0.25 * GB))
    assert by_size == models.plan_layers(by_size.shape, by_size.layers)
    assert (by_size.shape.hidden, by_size.layers) == (1024, 5)  # bench_budget's documented model
    with pytest.raises(ValueError):
        models.plan_layers(models.SHAPES[0], 0)


def test_a_shaped_model_is_cached_apart_from_one_of_the_same_size(tmp_path: Path) -> None:
    p = plan(3)
    assert models.model_home(tmp_path, p) == tmp_path / f"model-{p.nbytes}"
    assert models.model_home(tmp_path, p, sized=False).name == f"model-h2048-v32000-l3-{p.nbytes}"


def test_disk_need_follows_the_size_and_k() -> None:
    raw = plan(22).nbytes
    disk = scale_disk

    def need(
        ks: tuple[int, ...],
        budgets: tuple[int, ...],
        parts: tuple[str, ...],
        mergekit: bool,
        methods: tuple[str, ...] = ("task_arithmetic", "ties"),
    ) -> dict[str, int]:
        return disk.disk_need(raw, ks, parts, mergekit, bench_scale.merge_outputs(ks, budgets, methods))

    full = need((8, 16), (25, 10, 5), ("store", "merge"), True)
    assert full["experts"] == 16 * raw
    assert 60 * GB < disk.disk_total(full, 0) < 90 * GB
    fewer = need((8,), (25, 10, 5), ("store", "merge"), True)
    assert disk.disk_total(fewer, 0) < disk.disk_total(full, 0)
    quick_outputs = bench_scale.merge_outputs(bench_scale.QUICK_KS, (25, 10, 5))
    quick = disk.disk_need(plan(3).nbytes, bench_scale.QUICK_KS, ("store", "merge"), True, quick_outputs)
    assert disk.disk_total(quick, 0) < 10 * GB  # a few GB
    store_only = need((8, 16), (), ("store",), False)
    assert "experts" not in store_only and sum(store_only.values()) == 5 * raw  # base, dense, one tool's run
    assert disk.disk_total(full, 10 * GB) == disk.disk_total(full, 0) - 10 * GB  # cached inputs
    inputs = full["base model"] + full["dense fine-tune"] + full["experts"]
    more = disk.disk_total(full, inputs + 20 * GB)  # more experts cached than this run uses
    assert more == disk.disk_total(full, inputs) > 15 * GB  # what the run writes besides its inputs
    assert bench_scale.merge_outputs((8, 16), (25, 10, 5)) == 2 * (2 + 3)
    assert bench_scale.merge_outputs((8,), (25, 10, 5), ("ties",)) == 1
    ta_only = need((8, 16), (25, 10, 5), ("merge",), True, ("task_arithmetic",))
    assert disk.disk_total(ta_only, 0) < disk.disk_total(full, 0)


def test_cached_inputs_count_what_is_on_disk(tmp_path: Path) -> None:
    p = plan(1, "tiny")
    assert scale_disk.cached_inputs(tmp_path, p, ("store", "merge")) == 0
    model = models.model_home(tmp_path, p, sized=False) / "model"
    model.mkdir(parents=True)
    (model / "a.safetensors").write_bytes(b"x" * 100_000)
    (tmp_path / f"experts-{p.nbytes}").mkdir()
    (tmp_path / f"experts-{p.nbytes}" / "e").write_bytes(b"y" * 200_000)
    assert scale_disk.cached_inputs(tmp_path, p, ("store",)) >= 100_000
    assert scale_disk.cached_inputs(tmp_path, p, ("merge",)) >= 300_000


def test_a_run_short_of_disk_stops_before_writing_in_one_line(tmp_path: Path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(cli, "free_disk", lambda workdir: 1 * GB)
    workdir = tmp_path / "work"
    with pytest.raises(SystemExit) as exc:
        bench_scale.main(["--workdir", str(workdir)])
    message = str(exc.value.code)
    assert message.startswith(f"not enough disk in {workdir}: this run needs about ") and "\n" not in message
    assert "has 1.0 GB" in message
    assert "disk: this run needs about" in capsys.readouterr().out
    assert not workdir.exists()


# -- the chart ------------------------------------------------------------------------------


def chart() -> object:
    series = [
        plot.Series("K = 8: mgit", [(100, 50.0), (5, 10.0), (10, 12.0)], plot.PALETTE[0]),
        plot.Series("K = 8: mgit --no-checkout", [(5, 4.0), (100, 40.0)], plot.PALETTE[0], plot.DASHED, "s"),
    ]
    hlines = [plot.HLine("K = 8: mergekit & co", 150.0, plot.PALETTE[0])]
    ticks = [(5.0, "5%"), (10.0, "10%"), (100.0, "exact")]
    return plot.line_chart(series, hlines, title="t <1>", x_label="budget", y_label="s", x_ticks=ticks, log_x=True)


def legend(fig: object) -> list[str]:
    return [t.get_text() for t in fig.axes[0].get_legend().get_texts()]


def test_the_chart_is_svg_with_every_label_and_the_same_file_for_the_same_numbers(tmp_path: Path) -> None:
    plot.save(chart(), tmp_path / "a.svg")
    plot.save(chart(), tmp_path / "b.svg")
    svg = (tmp_path / "a.svg").read_text()
    assert svg == (tmp_path / "b.svg").read_text()  # no date, fixed ids: the same numbers, the same file
    root = ET.fromstring(svg)
    assert root.tag == f"{SVG}svg"
    texts = [t.text.strip() for t in root.iter(f"{SVG}text") if t.text]
    for label in ("t <1>", "K = 8: mgit", "K = 8: mgit --no-checkout", "K = 8: mergekit & co", "5%", "exact", "0"):
        assert label in texts
    plot.save(chart(), tmp_path / "a.png")
    assert (tmp_path / "a.png").read_bytes()[:4] == b"\x89PNG"


def test_the_chart_draws_lines_in_x_order_on_a_log_x_axis_and_a_zero_based_y_axis() -> None:
    ax = chart().axes[0]
    assert ax.get_xscale() == "log" and ax.get_ylim()[0] == 0
    assert [t.get_text() for t in ax.get_xticklabels()] == ["5%", "10%", "exact"]
    mergekit, solid, dashed = ax.get_lines()
    assert list(solid.get_xdata()) == [5, 10, 100] and list(solid.get_ydata()) == [10.0, 12.0, 50.0]
    assert dashed.get_linestyle() == "--" and dashed.get_marker() == "s"
    assert list(mergekit.get_ydata()) == [150.0, 150.0] and mergekit.get_linestyle() == ":"
    assert legend(chart()) == ["K = 8: mergekit & co", "K = 8: mgit", "K = 8: mgit --no-checkout"]


def test_the_benchmark_plot_draws_mgit_per_mode_and_mergekit_as_a_line() -> None:
    runs = [
        bench_scale.Merged(bench_scale.MergeRun(4, "task_arithmetic", "mergekit"), Proc(30.0, 0, 0.0, ""), [30.0], 0),
        *(
            bench_scale.Merged(bench_scale.MergeRun(4, "task_arithmetic", "mgit", b, co), Proc(t, 0, 0.0, ""), [t], 0)
            for b, co, t in ((None, True, 20.0), (None, False, 15.0), (10, True, 8.0), (10, False, 3.0))
        ),
        bench_scale.Merged(bench_scale.MergeRun(4, "ties", "mgit"), Proc(99.0, 0, 0.0, ""), [99.0], 0),
    ]
    fig = scale_report.plot(runs, (4,), (10,), "title")
    assert len(fig.axes[0].get_lines()) == 3  # mergekit, checked out and --no-checkout; ties is not on it
    assert legend(fig) == ["K = 4: mergekit-yaml", "K = 4: mgit merge", "K = 4: mgit merge --no-checkout"]


def _merged(run: object, seconds: float, record: dict | None = None) -> object:
    return bench_scale.Merged(run, Proc(seconds, 100 * 10**6, 0.0, ""), [seconds], 0, record or {})


def test_the_targets_leave_out_a_method_not_run_and_check_budgeted_reads_against_the_record() -> None:
    mr = bench_scale.MergeRun
    record = {
        "budget": {"limit_bytes": 1000},
        "bytes": {"experts_measured": 990, "base_measured": 500, "base_estimated": 400},
    }
    runs = [
        _merged(mr(4, "task_arithmetic", "mergekit"), 60.0),
        _merged(mr(4, "task_arithmetic", "mgit"), 20.0),
        _merged(mr(4, "task_arithmetic", "mgit", 10), 3.0, record),
        _merged(mr(4, "task_arithmetic", "mgit", 10, False), 2.0, record),
    ]
    rows = {t.metric: [t.shown, t.target, met_cell(t.met)] for t in scale_report.merge_targets(runs, (4,))}
    assert not any("ties" in metric for metric in rows)  # not run: no row saying "n/a"
    assert rows["K = 4, task_arithmetic exact: × faster than mergekit"] == ["3.00", "≥ 2", "yes"]
    assert rows["K = 4, --budget 10%: expert bytes read / the budget"] == ["0.990", "≤ 1", "yes"]
    base = rows["K = 4, --budget 10%: base bytes read / base chunks the plan computes from"]
    assert base == ["1.250", "≤ 1", "**no**"]  # read more of the base than the plan needs
    ties = [_merged(mr(4, "ties", "mergekit"), 90.0), _merged(mr(4, "ties", "mgit"), 30.0)]
    rows = {t.metric: [t.shown, t.target, met_cell(t.met)] for t in scale_report.merge_targets(ties, (4,))}
    assert rows["K = 4, ties exact: × faster than mergekit"] == ["3.00", "≥ 2.5", "yes"]
    assert not any("task_arithmetic" in metric or "budget" in metric for metric in rows)


def test_a_run_of_some_methods_has_its_own_section_and_plot() -> None:
    assert bench_scale.merge_title(("ties", "task_arithmetic")) == bench_scale.MERGE_TITLE
    assert bench_scale.docs_image(("task_arithmetic", "ties")) == bench_scale.DOCS_IMAGE
    title = bench_scale.merge_title(("task_arithmetic",))
    assert title == "## Merges at scale, task_arithmetic only (bench_scale.py)"
    assert bench_scale.docs_image(("task_arithmetic",)).name == "bench_scale-task_arithmetic.svg"


# -- arguments and runs ---------------------------------------------------------------------


def test_defaults_and_quick() -> None:
    a = bench_scale.parse_args([])
    assert (a.shape, a.layers, a.ks, a.budgets, a.parts) == ("tinyllama", 22, (8, 16), (25, 10, 5), ("store", "merge"))
    assert (a.warm, a.no_mergekit, a.no_dvc, a.reps) == (False, False, False, 1)
    q = bench_scale.parse_args(["--quick"])
    assert (q.layers, q.ks) == (bench_scale.QUICK_LAYERS, bench_scale.QUICK_KS)
    assert bench_scale.parse_args(["--quick", "--layers", "5", "--ks", "16,8,8"]).ks == (8, 16)


def test_budgets_ks_and_parts_parse_and_are_checked() -> None:
    assert bench_scale.parse_args(["--budgets", "25%,10%,5%"]).budgets == (25, 10, 5)
    assert bench_scale.parse_args(["--budgets", "5,50"]).budgets == (50, 5)
    assert bench_scale.parse_args(["--budgets", ""]).budgets == ()
    assert bench_scale.parse_args(["--parts", "merge"]).parts == ("merge",)
    assert bench_scale.parse_args([]).methods == ("task_arithmetic", "ties")
    assert bench_scale.parse_args(["--methods", "ties"]).methods == ("ties",)
    bad_args = (
        ["--budgets", "100"],
        ["--budgets", "ten"],
        ["--ks", "0"],
        ["--parts", "diff"],
        ["--layers", "-1"],
        ["--methods", "slerp"],
    )
    for bad in bad_args:
        with pytest.raises(SystemExit):
            bench_scale.parse_args(bad)


def test_every_mgit_merge_runs_with_and_without_checkout_when_it_can() -> None:
    runs = bench_scale.merge_runs(8, (25, 10), mergekit=True, no_checkout=True)
    labels = [(r.method, r.label) for r in runs]
    assert labels == [
        ("task_arithmetic", "mergekit-yaml"),
        ("task_arithmetic", "mgit merge"),
        ("task_arithmetic", "mgit merge --no-checkout"),
        ("task_arithmetic", "mgit merge --budget 25%"),
        ("task_arithmetic", "mgit merge --budget 25% --no-checkout"),
        ("task_arithmetic", "mgit merge --budget 10%"),
        ("task_arithmetic", "mgit merge --budget 10% --no-checkout"),
        ("ties", "mergekit-yaml"),
        ("ties", "mgit merge"),
        ("ties", "mgit merge --no-checkout"),
    ]
    assert len({r.branch for r in runs if r.tool == "mgit"}) == 8
    without = bench_scale.merge_runs(8, (10,), mergekit=False, no_checkout=False)
    assert [r.label for r in without] == ["mgit merge", "mgit merge --budget 10%", "mgit merge"]
    ties = bench_scale.merge_runs(8, (10,), mergekit=False, no_checkout=False, methods=("ties",))
    assert [(r.method, r.label) for r in ties] == [("ties", "mgit merge")]


def test_the_mgit_merge_command() -> None:
    run = bench_scale.MergeRun(4, "ties", "mgit", None, False)
    cmd = run.mgit_cmd(["mgit"])
    assert cmd[:4] == ["mgit", "-q", "merge", "--method=ties"]
    assert "--weights=0.25" in cmd and "--density=0.5" in cmd and "--no-checkout" in cmd
    assert cmd[cmd.index("-b") + 1] == run.branch and cmd[-4:] == [f"expert-{i}" for i in range(1, 5)]
    budgeted = bench_scale.MergeRun(4, "task_arithmetic", "mgit", 5).mgit_cmd(["mgit"])
    assert "--budget=5%" in budgeted and "--no-checkout" not in budgeted


def test_the_mergekit_config_matches_the_mgit_merge(tmp_path: Path) -> None:
    import json

    doc = json.loads(bench_scale.MergeRun(2, "ties", "mergekit").mergekit_config(tmp_path, [tmp_path] * 3))
    assert doc["merge_method"] == "ties" and doc["dtype"] == "bfloat16" and len(doc["models"]) == 2
    assert doc["models"][0]["parameters"] == {"weight": 0.5, "density": 0.5}


# -- end to end, tiny -----------------------------------------------------------------------


@pytest.mark.bench_smoke
def test_a_tiny_run_end_to_end(tmp_path: Path, monkeypatch, capsys) -> None:
    """The merge part of a 4 MB model, K = 2, task_arithmetic exact and at one budget, no mergekit (not
    installed from the network here), warm cache: its tables are printed, the chart written, each merge
    with and without --no-checkout. Of one method only, its section goes after the full run's, which
    stays, and its plot beside the full run's. (The storage part runs in the next test.)"""
    workdir, docs = tmp_path / "scale", tmp_path / "benchmarks.md"
    docs.write_text(f"# Benchmarks\n\n{bench_scale.MERGE_TITLE}\n\nall methods\n\n## Other (other.py)\n\nother\n")
    monkeypatch.setattr(bench_scale, "update_results", functools.partial(report.update_results, path=docs))
    named = bench_scale.docs_image
    monkeypatch.setattr(bench_scale, "docs_image", lambda methods: tmp_path / named(methods).name)
    argv = [
        "--workdir",
        str(workdir),
        *"--shape tiny --layers 2 --ks 2 --budgets 10 --methods task_arithmetic --parts merge".split(),
        *"--no-mergekit --warm --idle-wait 0 --other-wait 0 --write-docs".split(),
    ]
    assert bench_scale.main(argv) == 0
    out = capsys.readouterr().out
    title = bench_scale.merge_title(("task_arithmetic",))
    assert title in out and bench_scale.STORE_TITLE not in out
    text = docs.read_text()
    assert "all methods" in text and text.index(bench_scale.MERGE_TITLE) < text.index(title) < text.index("## Other")
    assert "| K = 2, --budget 10%: expert bytes read / the budget |" in text
    assert "(bench_scale-task_arithmetic.svg)" in text and (tmp_path / "bench_scale-task_arithmetic.svg").exists()
    assert not (tmp_path / "bench_scale.svg").exists()
    assert "| 2 | task_arithmetic | mgit merge --budget 10% |" in out
    assert "| 2 | task_arithmetic | mgit merge --budget 10% --no-checkout |" in out
    assert "**NO**" not in out
    root = ET.fromstring((workdir / "bench_scale-task_arithmetic.svg").read_text())
    assert "K = 2: mgit merge --no-checkout" in [t.text.strip() for t in root.iter(f"{SVG}text") if t.text]


@pytest.mark.bench_smoke
def test_a_run_of_one_part_writes_only_that_parts_section(tmp_path: Path, monkeypatch, capsys) -> None:
    """The storage part of a 2 MB model, no DVC (not installed from the network here): every tool's
    steps and `cp -r` are printed, the checkouts byte-identical. --parts store --write-docs replaces the
    storage section and leaves the merges' (and the plot), measured in an earlier run, as they are."""
    docs = tmp_path / "benchmarks.md"
    titles = bench_scale.MERGE_TITLE, bench_scale.STORE_TITLE
    docs.write_text(f"# Benchmarks\n\n{titles[0]}\n\nearlier merges\n\n{titles[1]}\n\nstale storage\n")
    monkeypatch.setattr(bench_scale, "update_results", functools.partial(report.update_results, path=docs))
    argv = [
        "--workdir",
        str(tmp_path / "scale"),
        *"--shape tiny --layers 1 --parts store --no-dvc --warm --idle-wait 0 --other-wait 0 --write-docs".split(),
    ]
    assert bench_scale.main(argv) == 0
    text = docs.read_text()
    assert "earlier merges" in text and "stale storage" not in text
    assert "| mgit | add + commit: base |" in text.split(bench_scale.STORE_TITLE)[1]
    assert text.index(bench_scale.MERGE_TITLE) < text.index(bench_scale.STORE_TITLE)
    assert not (tmp_path / "scale" / "bench_scale.svg").exists()  # nor copied over benchmarks/results/bench_scale.svg
    out = capsys.readouterr().out
    assert bench_scale.MERGE_TITLE not in out and bench_scale.STORE_TITLE in out
    assert "| mgit | add + commit: base |" in out and "| mgit | add + commit: dense fine-tune |" in out
    assert "| cp -r | copy the model directory |" in out
    assert "**NO**" not in out  # every checkout byte-identical


def test_the_storage_table_compares_each_tool_with_git_lfs_at_the_same_step() -> None:
    from harness.runner import Result

    def step(tool: str, name: str, seconds: float, stored: bool) -> Result:
        return Result(tool, name, Proc(seconds, 0, 0.0, ""), [seconds], 1 if stored else None)

    results = [
        step("mgit", "add + commit: base", 2.0, True),
        step("mgit", "checkout --force main", 1.0, False),
        step("git + git-lfs", "add + commit: base", 4.0, True),
        step("git + git-lfs", "checkout -- model", 3.0, False),
        step("dvc", "add: base", 8.0, True),
        step("dvc", "checkout", 6.0, False),
        step("cp -r", "copy the model directory", 0.5, False),
    ]
    rows = {
        tuple(c.strip() for c in line.split("|")[1:3]): line.split("|")[5:7]
        for line in scale_report.store_table(results, 10**9).splitlines()[2:]
    }
    assert [c.strip() for c in rows[("mgit", "add + commit: base")]] == ["2.00", ""]
    assert [c.strip() for c in rows[("dvc", "add: base")]] == ["0.50", ""]
    assert [c.strip() for c in rows[("mgit", "checkout --force main")]] == ["3.00", "2.00"]
    assert [c.strip() for c in rows[("dvc", "checkout")]] == ["0.50", "12.00"]
    assert [c.strip() for c in rows[("cp -r", "copy the model directory")]] == ["", ""]
