"""Git habits of history and inspection (issue 39): `log` on a damaged commit (defect 10),
`log --all/--stat/--format/--author/--since/--until`, revision ranges (`A..B`, `A...B`, `^A`) for
`log` and `diff`, `diff --name-only/--name-status`, `show --stat` and `status -s`. Where git can
read the same history (`.mgit` is a git repository), mgit's answer is compared with git's."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from helpers.cli import invoke
from helpers.histories import pushed_text
from helpers.histories import text_commit as _text_commit
from helpers.models import (
    LlamaSpec,
    commit_model,
    frozen_finetune,
    llama_state_dict,
    touch_later,
    write_model,
)
from rich.filesize import decimal

from mgit import Repository
from mgit.cli.views.logformat import relative
from mgit.graph import objects
from mgit.store.chunkstore import ChunkStore

SPEC = LlamaSpec(layers=2, hidden=16, intermediate=32, vocab=32)
GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")
DAY = 86_400


@dataclass
class History:
    """main: base (Ada, 400 days ago, tag v1) → two (Ada, 3 days ago: config.json edited);
    exp, from base: one (Bo, 20 days ago: a fine-tune, layer 0 frozen) → two (Bo, 1 day ago:
    another fine-tune of the base)."""

    repo: Repository
    base: str
    main2: str
    exp1: str
    exp2: str


@pytest.fixture
def clock(monkeypatch):
    """Commit times under the test's control: ``clock(seconds_ago)`` sets the time mgit stamps
    the next commits with (only the commit writer's clock is replaced)."""
    now = int(time.time())
    current = {"t": now}
    fake = types.SimpleNamespace(
        time=lambda: current["t"], timezone=time.timezone, altzone=time.altzone, localtime=time.localtime
    )
    monkeypatch.setattr(objects, "time", fake)

    def set_clock(seconds_ago: int) -> None:
        current["t"] = now - seconds_ago

    return set_clock


def _as(repo: Repository, name: str) -> None:
    repo.config_set("user.name", name)
    repo.config_set("user.email", f"{name.lower()}@example.com")


@pytest.fixture
def history(repo: Repository, clock) -> History:
    base_sd = llama_state_dict(SPEC)
    _as(repo, "Ada")
    clock(400 * DAY)
    base = commit_model(repo, base_sd, "base")
    repo.tag("v1")
    repo.checkout(create_branch="exp")
    _as(repo, "Bo")
    clock(20 * DAY)
    exp1 = commit_model(repo, frozen_finetune(base_sd, {0}, seed=1), "exp one")
    clock(1 * DAY)
    exp2 = commit_model(repo, frozen_finetune(base_sd, set(), seed=2), "exp two\n\nboth layers tuned")
    repo.checkout("main")
    _as(repo, "Ada")
    clock(3 * DAY)
    config = repo.root / "model" / "config.json"
    config.write_text(config.read_text().replace("}", ', "note": "two"}'))
    touch_later(config)
    repo.add(["model"])
    main2 = repo.commit("two")
    return History(repo, base, main2, exp1, exp2)


def _git(repo: Repository, *args: str) -> str:
    assert GIT is not None
    proc = subprocess.run([GIT, "--git-dir", str(repo.git_dir), *args], capture_output=True, text=True, check=True)
    return proc.stdout


def _mgit(repo: Repository, *args: str) -> str:
    return invoke(*args, cwd=repo.root, check=True).stdout


def _one_error_line(proc, code: int, *words: str) -> None:
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == code and len(lines) == 1, (proc.returncode, proc.stderr)
    assert lines[0].startswith("error:") and "internal error" not in lines[0] and "Traceback" not in proc.stderr
    for word in words:
        assert word in lines[0], (word, lines[0])


# -- defect 10: log names a damaged commit ------------------------------------------------------


@pytest.mark.parametrize("args", [("log",), ("log", "--graph", "--oneline"), ("log", "--all", "--json")])
def test_log_names_a_damaged_commit_in_one_line(history, args):
    path = history.repo.git_dir / "objects" / history.base[:2] / history.base[2:]
    os.chmod(path, 0o644)
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0x40
    path.write_bytes(bytes(data))
    history.repo.close()
    proc = invoke(*args, cwd=history.repo.root)
    _one_error_line(proc, 1, history.base[:12], "damaged", "mgit fsck --repair")


# -- which commits: --all, ranges, --author, --since/--until -------------------------------------


@needs_git
@pytest.mark.parametrize(
    "revs",
    [["--all"], ["main..exp"], ["exp..main"], ["main...exp"], ["exp", "^main"], ["..exp"], ["exp~1.."], ["v1...main"]],
)
def test_revision_ranges_and_all_select_what_git_selects(history, revs):
    repo = history.repo  # HEAD is main: `..exp` is main..exp, `exp~1..` is exp~1..main
    ours = _mgit(repo, "log", "--format=%H", *revs).split()
    assert ours == _git(repo, "log", "--format=%H", *revs).split()
    assert ours  # every range here selects something


def test_ranges_and_all_from_python(history):
    repo = history.repo
    assert [c.id for c in repo.log("main..exp")] == [history.exp2, history.exp1]
    assert [c.id for c in repo.log("main...exp")] == [history.exp2, history.main2, history.exp1]
    assert [c.id for c in repo.log(["exp", "^main"])] == [history.exp2, history.exp1]
    assert {c.id for c in repo.log(all_refs=True)} == {history.base, history.main2, history.exp1, history.exp2}
    assert repo.log("exp..exp") == []


@needs_git
@pytest.mark.parametrize(
    "options",
    [
        ["--author", "Bo"],
        ["--author", "ada@example"],
        ["--author", "^Bo", "--author", "^Ada"],
        ["--since", "2 weeks ago"],
        ["--until", "2 weeks ago"],
        ["--since", "30 days ago", "--until", "2 days ago"],
        ["--after", "2.weeks.ago", "--author", "Bo"],
    ],
)
def test_author_since_and_until_filter_as_git_does(history, options):
    repo = history.repo
    ours = _mgit(repo, "log", "--all", "--format=%H %an", *options).splitlines()
    assert ours == _git(repo, "log", "--all", "--format=%H %an", *options).splitlines()
    assert ours


def test_filters_from_python_and_bad_filters_are_refused(history):
    repo = history.repo
    assert [c.id for c in repo.log("exp", author="Bo")] == [history.exp2, history.exp1]
    assert [c.id for c in repo.log(all_refs=True, since="2 weeks ago")] == [history.exp2, history.main2]
    assert [c.id for c in repo.log(all_refs=True, until=int(time.time()) - 10 * DAY)] == [history.exp1, history.base]
    _one_error_line(invoke("log", "--author", "(", cwd=repo.root), 2, "--author", "'('")
    _one_error_line(invoke("log", "--since", "the day before", cwd=repo.root), 2, "--since", "'the day before'")


def test_log_graph_with_a_filter_joins_shown_commits_to_their_nearest_shown_ancestors(history):
    drawn = history.repo.log_graph("exp", author="Bo")
    assert [c.id for c in drawn.commits] == [history.exp2, history.exp1]
    assert drawn.parents == {history.exp2: (history.exp1,), history.exp1: ()}
    drawn = history.repo.log_graph(all_refs=True, since="30 days ago", max_count=2)
    assert len(drawn.commits) == 2 and drawn.parents[history.exp1] == ()


# -- how each commit shows: --format ---------------------------------------------------------------


@needs_git
def test_format_placeholders_are_gits(history):
    repo = history.repo
    template = "%H|%h|%T|%t|%P|%p|%s|%an|%ae|%at|%ai|%aI|%as|%ar|%cn|%ce|%ct|%ci|%cI|%cs|%cr|%%|%n%b|%B|x"
    ours = _mgit(repo, "log", "--all", f"--format={template}")
    assert ours == _git(repo, "log", "--all", "--abbrev=12", f"--format={template}")
    dates = _mgit(repo, "log", "--format=%ad|%cd")
    assert dates == _git(repo, "log", "--date=format:%a %b %d %H:%M:%S %Y %z", "--format=%ad|%cd")


def test_format_presets_and_ref_names(history):
    repo = history.repo
    lines = _mgit(repo, "log", "--format=%h%d|%D", "-n", "2", "main").splitlines()
    assert lines == [f"{history.main2[:12]} (HEAD -> main)|HEAD -> main", f"{history.base[:12]} (tag: v1)|tag: v1"]
    assert _mgit(repo, "log", "--pretty=oneline", "exp").splitlines() == [
        f"{history.exp2} (exp) exp two",
        f"{history.exp1} exp one",
        f"{history.base} (tag: v1) base",
    ]
    short = _mgit(repo, "log", "--format=short", "-n", "1", "exp")
    assert short.splitlines() == [f"commit {history.exp2} (exp)", "Author: Bo <bo@example.com>", "", "    exp two", ""]
    full = _mgit(repo, "log", "--format=full", "-n", "1", "exp").splitlines()
    assert (
        full[1:3] == ["Author: Bo <bo@example.com>", "Commit: Bo <bo@example.com>"]
        and full[-2] == "    both layers tuned"
    )
    fuller = _mgit(repo, "log", "--format=fuller", "-n", "1", "exp").splitlines()
    assert [line.split(":")[0] for line in fuller[1:5]] == ["Author", "AuthorDate", "Commit", "CommitDate"]
    assert _mgit(repo, "log", "--format=medium", "-n", "1") == _mgit(repo, "log", "-n", "1")
    _one_error_line(invoke("log", "--format=nonsense", cwd=repo.root), 2, "--format", "'nonsense'")
    _one_error_line(invoke("log", "--oneline", "--format=%H", cwd=repo.root), 2, "--oneline or --format")


@needs_git
@pytest.mark.parametrize("ago", [44 * 60, 5 * 3600, 30 * 3600, 3 * DAY, 20 * DAY, 100 * DAY, 500 * DAY, 9 * 365 * DAY])
def test_relative_dates_are_gits(repo, clock, ago):
    """Ages far from any rounding boundary: the seconds between the two reads change nothing."""
    clock(ago)
    commit_model(repo, llama_state_dict(SPEC), "then")
    now = int(time.time())
    assert _mgit(repo, "log", "--format=%ar") == _git(repo, "log", "--format=%ar")
    assert relative(now - ago, now) == _git(repo, "log", "--format=%ar").strip()


def test_relative_dates_say_one_without_a_plural():
    assert relative(0, 1) == "1 second ago" and relative(0, 89) == "89 seconds ago"
    assert relative(0, 90) == "2 minutes ago"
    assert relative(0, 400 * DAY) == "1 year, 1 month ago" and relative(0, 365 * DAY) == "1 year ago"
    assert relative(10, 0) == "in the future"


# -- --stat (log, show): from manifests only --------------------------------------------------------


def no_chunk_reads(monkeypatch) -> None:
    """From here on, reading any chunk (tensor data) fails the test."""

    def refuse(self, *args, **kwargs):
        raise AssertionError("a chunk was read")

    monkeypatch.setattr(ChunkStore, "_read", refuse)


def test_log_stat_counts_files_tensors_and_lines_without_reading_tensor_data(history, monkeypatch):
    no_chunk_reads(monkeypatch)
    repo = history.repo
    tensors = len(llama_state_dict(SPEC))
    size = decimal(sum(t.numel() * t.element_size() for t in llama_state_dict(SPEC).values()))
    text = _mgit(repo, "log", "--stat", "--oneline", "main")
    assert text.splitlines() == [
        f"{history.main2[:12]} (HEAD -> main) two",
        " model/config.json | modified: +1 -1",
        " 1 file(s) changed; no tensor changed; 0 chunk(s), 0 bytes",
        f"{history.base[:12]} (tag: v1) base",
        " model/config.json | added: +1 -0",
        f" model/model.safetensors | added: {tensors} tensor(s) added, {tensors} chunk(s), {size}",
        f" 2 file(s) changed; {tensors} tensor(s) added; {tensors} chunk(s), {size}",
    ]
    doc = json.loads(_mgit(repo, "log", "--stat", "--json", "exp~1..exp"))
    (commit,) = doc["commits"]
    (model,) = commit["stat"]
    assert doc["schema"] == "mgit.log/1" and commit["id"] == history.exp2
    one, two = (frozen_finetune(llama_state_dict(SPEC), frozen, seed=k) for frozen, k in (({0}, 1), (set(), 2)))
    changed = sum(1 for name in one if not torch.equal(one[name], two[name]))
    assert model["path"] == "model/model.safetensors" and model["status"] == "modified"
    assert model["tensors_changed"] == changed and model["chunks_changed"] >= changed and model["bytes_changed"] > 0
    assert model["lines_added"] is None and "text" not in model
    config = json.loads(_mgit(repo, "log", "--stat", "--json", "-n", "1", "main"))["commits"][0]["stat"][0]
    assert (config["path"], config["lines_added"], config["lines_removed"]) == ("model/config.json", 1, 1)
    graph = _mgit(repo, "log", "--graph", "--stat", "--format=%s", "main").splitlines()
    assert graph[:3] == ["* two", "|", "|  model/config.json | modified: +1 -1"]


def test_a_merge_stat_is_against_its_base(history):
    repo = history.repo
    merge_exp = ("merge", "exp", "--method", "linear", "--weights", "1", "-m", "merge exp", "--seed", "1")
    invoke(*merge_exp, cwd=repo.root, check=True)
    merge = repo.resolve("HEAD")
    assert repo.graph.commit(merge).parents == (history.main2, history.exp2)
    diff = repo.changes(merge)
    assert _summary(diff) == _summary(repo.diff(history.main2, merge, numeric=False))
    assert "model/model.safetensors" in [f.path for f in diff.files]
    assert not diff.numeric and (diff.a, diff.b) == (history.main2[:12], merge[:12])


def test_show_stat(history, monkeypatch):
    no_chunk_reads(monkeypatch)
    repo = history.repo
    text = _mgit(repo, "show", "--stat", "main").splitlines()
    assert text[0] == f"commit {history.main2}" and text[-2:] == [
        " model/config.json | modified: +1 -1",
        " 1 file(s) changed; no tensor changed; 0 chunk(s), 0 bytes",
    ]
    doc = json.loads(_mgit(repo, "show", "--stat", "--json", "exp"))
    assert doc["schema"] == "mgit.show/1" and [f["path"] for f in doc["stat"]] == ["model/model.safetensors"]
    assert "stat" not in json.loads(_mgit(repo, "show", "--json", "exp"))


# -- diff: ranges, --name-only, --name-status ---------------------------------------------------------


def _summary(result) -> list[tuple[str, str, int]]:
    return [(f.path, f.status, f.tensors_changed) for f in result.files]


def test_diff_ranges_mean_what_they_mean_in_git(history):
    repo = history.repo
    two_dots = repo.diff("main..exp", numeric=False)
    assert _summary(two_dots) == _summary(repo.diff("main", "exp", numeric=False))
    assert [f.path for f in two_dots.files] == ["model/config.json", "model/model.safetensors"]
    three_dots = repo.diff("main...exp", numeric=False)  # from the merge base: what exp did
    assert _summary(three_dots) == _summary(repo.diff(history.base, "exp", numeric=False))
    assert [f.path for f in three_dots.files] == ["model/model.safetensors"]
    assert (three_dots.a, three_dots.b) == (history.base[:12], "exp")
    assert _mgit(repo, "diff", "--name-only", "main...exp") == "model/model.safetensors\n"
    assert _mgit(repo, "diff", "--name-status", "exp...main") == "M\tmodel/config.json\n"
    doc = json.loads(_mgit(repo, "diff", "main..exp", "--stat", "--json"))
    assert (doc["a"], doc["b"]) == ("main", "exp")
    proc = invoke("diff", "main..nowhere", cwd=repo.root)
    _one_error_line(proc, 1, "nowhere")


def test_diff_name_status_lists_added_deleted_and_modified_paths(history, monkeypatch):
    repo = history.repo
    (repo.root / "notes.txt").write_text("hello\n")
    (repo.root / "model" / "config.json").unlink()
    write_model(repo.root / "model", frozen_finetune(llama_state_dict(SPEC), {1}, seed=5))
    (repo.root / "model" / "config.json").unlink()
    for f in (repo.root / "model").iterdir():
        touch_later(f)
    touch_later(repo.root / "notes.txt")
    repo.add(["."])
    repo.commit("three")
    no_chunk_reads(monkeypatch)
    assert _mgit(repo, "diff", "--name-status", "HEAD~1", "HEAD").splitlines() == [
        "D\tmodel/config.json",
        "M\tmodel/model.safetensors",
        "A\tnotes.txt",
    ]
    assert _mgit(repo, "diff", "--name-only", "HEAD~1..HEAD").splitlines() == [
        "model/config.json",
        "model/model.safetensors",
        "notes.txt",
    ]
    (repo.root / "notes.txt").write_text("changed\n")
    touch_later(repo.root / "notes.txt")
    assert _mgit(repo, "diff", "--name-status") == "M\tnotes.txt\n"


# -- status -s ------------------------------------------------------------------------------------------


def test_status_short_is_gits_two_columns(history):
    repo = history.repo
    root = repo.root
    (root / "new file.txt").write_text("staged\n")
    touch_later(root / "new file.txt")
    repo.add(["new file.txt"])
    (root / "new file.txt").write_text("staged, then changed\n")
    touch_later(root / "new file.txt")
    config = root / "model" / "config.json"
    config.write_text(config.read_text() + "\n")
    touch_later(config)
    repo.rm(["model/model.safetensors"], cached=True)
    (root / "zz-untracked.txt").write_text("x\n")
    (root / "é.txt").write_text("x\n")
    expected = [
        " M model/config.json",
        "D  model/model.safetensors",
        'AM "new file.txt"',
        "?? model/model.safetensors",
        "?? zz-untracked.txt",
        '?? "\\303\\251.txt"',
    ]
    assert _mgit(repo, "status", "-s").splitlines() == expected
    assert _mgit(repo, "status", "--porcelain").splitlines() == expected
    assert json.loads(_mgit(repo, "status", "--short", "--json"))["schema"] == "mgit.status/1"
    for path in ("new file.txt", "zz-untracked.txt", "é.txt", "model/config.json"):
        (root / path).unlink(missing_ok=True)
    assert _mgit(repo, "status", "--short").splitlines() == [
        " D model/config.json",
        "D  model/model.safetensors",
        'AD "new file.txt"',
        "?? model/model.safetensors",
    ]


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


@pytest.fixture
def remote(repo: Repository, tmp_path: Path) -> tuple[Repository, str]:
    return pushed_text(repo, tmp_path)


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
