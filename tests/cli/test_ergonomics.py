"""CLI ergonomics a git user expects: light commands load no heavy machinery, global options
anywhere, a pager, short ref names in reflog, `diff --stat`, and no nested repositories."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.models import TINY, commit_model, llama_state_dict
from helpers.run import run_mgit

from mgit import Repository

PROBE = """
import json, sys
from mgit.cli import main
rc = main(sys.argv[1:])
heavy = sorted(m for m in sys.modules if m.split(".")[0] in ("torch", "ml_dtypes", "yaml")
               or m.startswith(("mgit.merge.", "mgit.diff.")))
print("MODULES=" + json.dumps({"rc": rc, "heavy": heavy}))
"""


def loaded_by(cwd: Path, *args: str) -> dict:
    """Run ``mgit ARGS`` in a fresh interpreter; the heavy modules it left imported."""
    proc = subprocess.run(
        [sys.executable, "-c", PROBE, *args], cwd=cwd, capture_output=True, text=True, timeout=120, env=os.environ
    )
    line = next(x for x in proc.stdout.splitlines() if x.startswith("MODULES="))
    return json.loads(line.removeprefix("MODULES="))


@pytest.fixture(scope="module")
def committed_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A repository with one commit of a small bf16 model, made once by the CLI (in-process)."""
    from helpers.models import llama_state_dict, write_model

    work = tmp_path_factory.mktemp("template") / "work"
    work.mkdir()
    for args in (("init",), ("config", "user.name", "Ada"), ("config", "user.email", "ada@example.com")):
        invoke(*args, cwd=work, check=True)
    write_model(work / "model", llama_state_dict())
    invoke("add", "model", cwd=work, check=True)
    invoke("commit", "-m", "base", cwd=work, check=True)
    return work


@pytest.fixture
def committed(tmp_path: Path, committed_template: Path) -> Path:
    """A copy of the template for each test (three CLI runs less per test)."""
    return Path(shutil.copytree(committed_template, tmp_path / "work", symlinks=True))


# -- item 12: light commands import no torch, merge or diff machinery ---------------------------


@pytest.mark.parametrize(
    "args",
    [["--help"], ["status"], ["log"], ["branch"], ["tag"], ["reflog"], ["config", "user.name"], ["show", "--help"]],
)
def test_light_commands_import_no_heavy_modules(committed: Path, args: list[str]) -> None:
    got = loaded_by(committed, *args)
    assert got["rc"] == 0
    assert got["heavy"] == []


def test_init_imports_no_heavy_modules(tmp_path: Path) -> None:
    got = loaded_by(tmp_path, "init", "fresh")
    assert got["rc"] == 0 and got["heavy"] == []


def test_bad_merge_parameter_refused_before_torch(committed: Path) -> None:
    got = loaded_by(committed, "merge", "HEAD", "--method", "ties", "--density", "1.5")
    assert got["rc"] != 0
    assert not any(m.split(".")[0] == "torch" for m in got["heavy"]), got["heavy"]


def test_bad_merge_config_refused_before_torch(committed: Path) -> None:
    (committed / "bad.yaml").write_text("merge_method: [unclosed\n")
    got = loaded_by(committed, "merge", "--config", "bad.yaml")
    assert got["rc"] != 0
    assert not any(m.split(".")[0] == "torch" for m in got["heavy"]), got["heavy"]


# -- item 13: global options before or after the command; -q silences notes, not results ------


def test_quiet_after_the_command(committed: Path) -> None:
    invoke("branch", "other", cwd=committed, check=True)
    quiet = invoke("checkout", "other", "-q", cwd=committed)
    assert quiet.returncode == 0, quiet.stderr
    assert quiet.stderr == ""
    loud = invoke("checkout", "main", cwd=committed, check=True)
    assert "Switched to branch 'main'" in loud.stderr


def test_quiet_before_the_command_keeps_results_and_warnings(committed: Path) -> None:
    detached = invoke("-q", "checkout", "HEAD~0", cwd=committed, check=True)
    assert detached.stderr.startswith("warning: HEAD is now detached")
    invoke("checkout", "main", cwd=committed, check=True)
    (committed / "notes.txt").write_text("hello\n")
    invoke("add", "notes.txt", "--quiet", cwd=committed, check=True)
    done = invoke("commit", "-m", "notes", "-q", cwd=committed, check=True)
    assert done.stdout.startswith("[main ") and done.stderr == ""


def test_debug_after_the_command_shows_the_traceback(committed: Path) -> None:
    plain = invoke("reflog", "show", "nope", cwd=committed)
    assert plain.returncode != 0 and "Traceback" not in plain.stderr
    debug = run_mgit("reflog", "show", "nope", "--debug", cwd=committed)
    assert debug.returncode != 0 and "Traceback" in debug.stderr


def test_every_command_takes_the_global_flags() -> None:
    from mgit import cli as cli_module

    cli_module._add_global_options(cli_module.cli)
    cli_module._add_global_options(cli_module.cli)  # idempotent

    def commands(group, prefix: str = "") -> list[tuple[str, object]]:
        found = []
        for name, command in group.commands.items():
            found.append((prefix + name, command))
            if hasattr(command, "commands"):
                found += commands(command, f"{prefix}{name} ")
        return found

    listed = commands(cli_module.cli)
    assert len(listed) > 25
    for name, command in listed:
        opts = [o for p in command.params for o in getattr(p, "opts", ())]
        for flag in ("-q", "--quiet", "--debug", "--no-pager"):
            assert opts.count(flag) == 1, (name, flag)


def test_merge_summary_is_a_result_on_stdout_and_quiet_keeps_stderr_empty(committed: Path) -> None:
    from helpers.models import frozen_finetune, llama_state_dict, write_model

    invoke("checkout", "-b", "tuned", cwd=committed, check=True)
    write_model(committed / "model", frozen_finetune(llama_state_dict(), {0}))
    invoke("add", "model", cwd=committed, check=True)
    invoke("commit", "-m", "tuned", cwd=committed, check=True)
    invoke("checkout", "main", cwd=committed, check=True)
    done = invoke("merge", "tuned", "--method", "task_arithmetic", "--weights", "0.5", "-q", cwd=committed)
    assert done.returncode == 0, done.stderr
    assert done.stderr == "" and done.stdout.startswith("merged 1 expert(s) with task_arithmetic")
    assert "merge tuned" in invoke("log", "--oneline", "-n", "1", cwd=committed, check=True).stdout


# -- item 8: reflog takes short ref names; unknown ones are an error ----------------------------


def test_reflog_short_names(committed: Path) -> None:
    full = invoke("reflog", "show", "refs/heads/main", cwd=committed, check=True).stdout
    short = invoke("reflog", "show", "main", cwd=committed, check=True).stdout
    assert short.strip() and len(short.splitlines()) == len(full.splitlines())
    assert short.split()[0] == full.split()[0] and "main@{0}" in short
    assert invoke("reflog", "show", "HEAD", cwd=committed, check=True).stdout.strip()
    assert invoke("reflog", cwd=committed, check=True).stdout.strip()


def test_reflog_remote_tracking_and_tag_names(committed: Path, tmp_path: Path) -> None:
    invoke("remote", "add", "origin", str(tmp_path / "remote"), cwd=committed, check=True)
    invoke("push", "origin", "main", cwd=committed, check=True)
    clone = tmp_path / "clone"
    invoke("clone", str(tmp_path / "remote"), str(clone), cwd=tmp_path, check=True)
    for where in (committed, clone):
        for name in ("origin/main", "remotes/origin/main", "refs/remotes/origin/main"):
            proc = invoke("reflog", "show", name, cwd=where)
            assert proc.returncode == 0 and proc.stderr == "", (where, name, proc.stderr)
    invoke("tag", "v1", cwd=committed, check=True)
    assert invoke("reflog", "show", "v1", cwd=committed).returncode == 0


def test_reflog_unknown_ref_is_an_error(committed: Path) -> None:
    for name in ("nope", "origin/main", "../config"):
        proc = invoke("reflog", "show", name, cwd=committed)
        assert proc.returncode != 0 and proc.stdout == ""
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: unknown ref"), proc.stderr


# -- item 15: no silent nested repository -------------------------------------------------------


def test_init_inside_a_repository_needs_force(committed: Path) -> None:
    refused = invoke("init", "inner", cwd=committed)
    assert refused.returncode != 0
    lines = refused.stderr.strip().splitlines()
    assert len(lines) == 1 and "--force" in lines[0] and str(committed) in lines[0]
    assert not (committed / "inner" / ".mgit").exists()
    (committed / "model" / "deep").mkdir()
    assert invoke("init", cwd=committed / "model" / "deep").returncode != 0
    forced = invoke("init", "inner", "--force", cwd=committed, check=True)
    assert forced.stderr.startswith("warning: creating a repository nested")
    assert (committed / "inner" / ".mgit" / "HEAD").is_file()


def test_init_outside_any_repository_is_quiet(tmp_path: Path) -> None:
    done = invoke("init", "fresh", cwd=tmp_path, check=True)
    assert done.stderr == "" and "Initialized empty mgit repository" in done.stdout


# -- item 5: diff --stat is one line per file, moved tensors counted as moved -------------------


def test_stat_after_reshard_counts_moves(committed: Path) -> None:
    from helpers.models import llama_state_dict, touch_later, write_model

    shutil.rmtree(committed / "model")
    write_model(committed / "model", llama_state_dict(), shards=2)
    for f in (committed / "model").iterdir():
        touch_later(f)
    invoke("add", "model", cwd=committed, check=True)
    invoke("commit", "-m", "two shards", cwd=committed, check=True)
    stat = invoke("diff", "HEAD~1", "HEAD", "--stat", cwd=committed, check=True).stdout
    lines = stat.splitlines()
    assert len(lines) == 5, stat  # 4 files + totals
    assert " model/model.safetensors | removed: 39 tensor(s) moved" in lines
    assert any(line.startswith(" model/model.safetensors.index.json | added: +") for line in lines)
    assert "changed:" not in stat and "@@" not in stat and "+++" not in stat
    assert lines[-1].startswith(" 4 file(s) changed; 39 tensor(s) moved; 0 chunk(s)")
    doc = json.loads(invoke("diff", "HEAD~1", "HEAD", "--stat", "--json", cwd=committed, check=True).stdout)
    old = next(f for f in doc["files"] if f["path"] == "model/model.safetensors")
    assert old["tensors_moved"] == 39 and old["tensors_changed"] == 0


def test_stat_counts_changed_added_removed(committed: Path) -> None:
    from helpers.models import llama_state_dict, touch_later, write_model

    sd = llama_state_dict()
    sd["lm_head.weight"] = sd["lm_head.weight"] * 2
    sd["extra.weight"] = sd.pop("model.norm.weight")[:8].clone()
    write_model(committed / "model", sd)
    touch_later(committed / "model" / "model.safetensors")
    stat = invoke("diff", "--stat", cwd=committed, check=True).stdout
    assert " model/model.safetensors | modified: 3 tensor(s): 1 changed, 1 added, 1 removed, " in stat


# -- item 7: a pager for long output; long text diffs summarised ---------------------------------


@pytest.mark.parametrize(
    ("env", "tty", "enabled", "expected"),
    [
        ({}, True, True, "less"),
        ({}, False, True, None),
        ({}, True, False, None),
        ({"PAGER": "more"}, True, True, "more"),
        ({"PAGER": "more", "MGIT_PAGER": "most -s"}, True, True, "most -s"),
        ({"PAGER": "more", "MGIT_PAGER": ""}, True, True, None),
        ({"MGIT_PAGER": "cat"}, True, True, None),
        ({"PAGER": ""}, True, True, None),
        ({"PAGER": "cat"}, True, True, None),
        ({"MGIT_PAGER": "less"}, False, True, None),
    ],
)
def test_pager_decision(env: dict, tty: bool, enabled: bool, expected: str | None) -> None:
    from mgit.pager import pager_command

    assert pager_command(env, tty, enabled) == expected


def run_on_tty(cwd: Path, *args: str, env: dict) -> tuple[int, str]:
    """``mgit ARGS`` with stdout on a pseudo-terminal; (exit status, what reached the terminal)."""
    import pty
    import select

    master, slave = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mgit", *args],
        cwd=cwd,
        stdout=slave,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **env},
    )
    os.close(slave)
    seen = b""
    while True:
        ready, _, _ = select.select([master], [], [], 60)
        if not ready:
            break
        try:
            chunk = os.read(master, 65536)
        except OSError:  # EIO: every writer closed the terminal
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    proc.stderr.close()
    return proc.wait(timeout=60), seen.decode(errors="replace")


def test_pager_runs_when_stdout_is_a_terminal(committed: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    env = {"MGIT_PAGER": f"cat > {paged}", "PAGER": "false"}
    rc, screen = run_on_tty(committed, "log", env=env)
    assert rc == 0
    assert "commit " in paged.read_text() and "base" in paged.read_text()
    assert "base" not in screen
    paged.unlink()
    for how in (["--no-pager", "log"], ["log", "--no-pager"]):
        rc, screen = run_on_tty(committed, *how, env=env)
        assert rc == 0 and "base" in screen and not paged.exists(), how
    rc, screen = run_on_tty(committed, "log", env={"MGIT_PAGER": "cat", "PAGER": f"cat > {paged}"})
    assert rc == 0 and "base" in screen and not paged.exists()


def test_no_pager_when_stdout_is_not_a_terminal(committed: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    proc = run_mgit("log", cwd=committed, env={"MGIT_PAGER": f"cat > {paged}"}, check=True)
    assert "base" in proc.stdout and not paged.exists()


def test_light_command_not_paged(committed: Path, tmp_path: Path) -> None:
    paged = tmp_path / "paged.txt"
    rc, screen = run_on_tty(committed, "status", env={"MGIT_PAGER": f"cat > {paged}"})
    assert rc == 0 and "On branch main" in screen and not paged.exists()


def test_long_text_diff_summarised_unless_full(committed: Path) -> None:
    vocab = committed / "vocab.txt"
    vocab.write_text("".join(f"token{i}\n" for i in range(3000)))
    invoke("add", "vocab.txt", cwd=committed, check=True)
    invoke("commit", "-m", "vocab", cwd=committed, check=True)
    vocab.write_text("".join(f"token{i}{'x' if i % 2 else ''}\n" for i in range(3000)))
    short = invoke("diff", cwd=committed, check=True).stdout
    assert len(short.splitlines()) <= 202
    assert "more diff line(s) not shown" in short and "+1500 -1500" in short and "--full" in short
    full = invoke("diff", "--full", cwd=committed, check=True).stdout
    assert len(full.splitlines()) > 3000 and "not shown" not in full
    assert "token2999x" in full and "token2999x" not in short


def test_shorten_keeps_whole_hunks() -> None:
    import difflib

    from mgit.diff.text import shorten

    old = [f"line {i}\n" for i in range(400)]
    new = [line.replace("line", "LINE") if i % 40 == 0 else line for i, line in enumerate(old)]
    diff = "".join(difflib.unified_diff(old, new, "a", "b"))
    assert shorten(diff, "f", limit=10_000) == diff
    cut = shorten(diff, "f", limit=50)
    kept, note = cut.splitlines()[:-1], cut.splitlines()[-1]
    assert len(kept) <= 50 and kept[:2] == ["--- a", "+++ b"]
    assert diff.startswith("".join(line + "\n" for line in kept))
    hunks = [i for i, line in enumerate(diff.splitlines()) if line.startswith("@@")]
    assert len(kept) in hunks  # cut at a hunk boundary
    assert note.startswith("… f: ") and "+10 -10" in note
    one_hunk = "".join(difflib.unified_diff(old, [line + "!\n" for line in old], "a", "b"))
    assert len(shorten(one_hunk, "g", limit=30).splitlines()) == 31


# -- merge --help -------------------------------------------------------------------------------


def test_merge_help_lists_every_method_without_importing_torch():
    from mgit.merge.methods.registry import METHODS

    code = (
        "import sys; from mgit.cli import main; rc = main(['merge', '--help']); "
        "assert 'torch' not in sys.modules, 'torch imported'; sys.exit(rc)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=os.environ)
    assert proc.returncode == 0, proc.stderr
    listed = proc.stdout.split("Methods (--method; docs/merging.md):")[1]
    assert [
        line.split()[0] for line in listed.splitlines() if line.startswith("  ") and not line.startswith("   ")
    ] == sorted(METHODS)


# -- item 4: a pager that does not exist prints directly ----------------------------------------


def test_a_missing_pager_prints_directly(repo: Repository) -> None:
    commit_model(repo, llama_state_dict(TINY, seed=1), "base")
    repo.close()
    for env in ({"PAGER": "nonexistent-pager-xyz"}, {"MGIT_PAGER": "LESS=R nonexistent-pager-xyz -R"}):
        rc, screen = run_on_tty(repo.root, "log", env=env)
        assert rc == 0 and "base" in screen, env


def test_pager_program_lookup() -> None:
    from mgit.pager import _runnable

    assert _runnable("cat > out.txt") and _runnable("LESS=R cat")
    assert not _runnable("nonexistent-pager-xyz -R") and not _runnable("A=1 nonexistent-pager-xyz")
