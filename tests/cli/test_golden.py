"""Golden tests: every `--json` schema of the CLI and its main text tables, byte for byte.

One small deterministic repository is built once per module by running the CLI in-process
(two commits, two expert branches, a tag, a linear merge, a directory remote with push, fetch,
pull and clone); each step's output is compared against a file in tests/cli/golden/. Only
what genuinely differs between runs is normalised (ids, which hash the commit time; dates;
the temporary directory); everything else must match exactly, so that moving code around
(issue 13) is proven not to change a single byte of output.

Regenerate the goldens from the current behaviour with ``MGIT_UPDATE_GOLDEN=1 pytest tests/cli``.
"""

from __future__ import annotations

import difflib
import itertools
import os
import re
import time
import types
from pathlib import Path

import pytest
from helpers.cli import Result, invoke
from helpers.models import LlamaSpec, frozen_finetune, llama_state_dict, touch_later, write_model

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("MGIT_UPDATE_GOLDEN") == "1"
SPEC = LlamaSpec(layers=2, hidden=16, intermediate=48, vocab=64)
MERGE = ("merge", "sft", "exp2", "--method", "linear", "--weights", "0.5", "--seed", "7")

# The script, in order: (case name or None for an uncompared setup step, working dir, args).
# A step whose name is a string is compared against golden/<name>.txt. "@model:" steps write models.
SCRIPT: list[tuple[str | None, str, tuple[str, ...]]] = [
    ("init", "work", ("init",)),
    ("version", "work", ("--version",)),
    (None, "work", ("config", "user.name", "Ada")),
    (None, "work", ("config", "user.email", "ada@example.com")),
    (None, "work", ("@model:base",)),
    ("status_untracked", "work", ("status",)),
    ("add_json", "work", ("add", "model/", "--json")),
    ("status_staged_json", "work", ("status", "--json")),
    ("status_staged", "work", ("status",)),
    ("commit_json", "work", ("commit", "-m", "base", "--json")),
    ("tag_create", "work", ("tag", "v1")),
    ("checkout_b_json", "work", ("checkout", "-b", "sft", "--json")),
    (None, "work", ("@model:sft",)),
    ("status_modified", "work", ("status",)),
    ("status_modified_json", "work", ("status", "--json")),
    ("diff_worktree", "work", ("diff",)),
    ("add_modified_json", "work", ("add", "model/", "--json")),
    ("commit_text", "work", ("commit", "-m", "sft: layer 1 tuned")),
    ("checkout_main", "work", ("checkout", "main")),
    ("checkout_b_exp2", "work", ("checkout", "-b", "exp2")),
    (None, "work", ("@model:exp2",)),
    (None, "work", ("add", "model/")),
    (None, "work", ("commit", "-m", "exp2: layer 0 tuned")),
    ("checkout_main_json", "work", ("checkout", "main", "--json")),
    ("merge_dry_run", "work", (*MERGE, "--dry-run")),
    ("merge_dry_run_json", "work", (*MERGE, "--dry-run", "--json")),
    ("merge_explain", "work", (*MERGE, "--budget", "50%", "--explain")),
    ("merge_explain_json", "work", (*MERGE, "--budget", "50%", "--explain", "--json")),
    ("merge_json", "work", (*MERGE, "-b", "merged", "-m", "merge sft and exp2", "--json")),
    ("merge_text", "work", (*MERGE, "-b", "merged2", "-m", "merge again")),
    ("tag_create_merged", "work", ("tag", "m1", "merged")),
    ("status_clean", "work", ("status",)),
    ("status_clean_json", "work", ("status", "--json")),
    ("log", "work", ("log", "merged")),
    ("log_oneline", "work", ("log", "--oneline", "merged")),
    ("log_graph", "work", ("log", "--graph", "merged")),
    ("log_json", "work", ("log", "--json", "merged")),
    ("log_paths", "work", ("log", "--oneline", "merged", "--", "model/config.json")),
    ("lineage", "work", ("lineage", "merged")),
    ("lineage_json", "work", ("lineage", "merged", "--json")),
    ("show", "work", ("show", "v1")),
    ("show_stats", "work", ("show", "sft", "--stats")),
    ("show_json", "work", ("show", "v1", "--json")),
    ("show_merge", "work", ("show", "merged")),
    ("show_merge_json", "work", ("show", "merged", "--stats", "--json")),
    ("diff", "work", ("diff", "v1", "sft")),
    ("diff_stat", "work", ("diff", "v1", "sft", "--stat")),
    ("diff_by_layer", "work", ("diff", "v1", "merged", "--by-layer")),
    ("diff_json", "work", ("diff", "v1", "sft", "--json")),
    ("diff_stat_json", "work", ("diff", "v1", "sft", "--stat", "--json")),
    ("diff_none", "work", ("diff", "v1", "v1")),
    ("du", "work", ("du", "-n", "10")),
    ("du_rev", "work", ("du", "merged")),
    ("du_json", "work", ("du", "--json")),
    ("tag_list", "work", ("tag",)),
    ("tag_json", "work", ("tag", "--json")),
    ("branch_list", "work", ("branch",)),
    ("branch_json", "work", ("branch", "--json")),
    ("reflog", "work", ("reflog",)),
    ("reflog_json", "work", ("reflog", "--json")),
    ("reflog_show_sft", "work", ("reflog", "show", "sft")),
    ("reflog_show_json", "work", ("reflog", "show", "main", "--json")),
    ("reflog_tag", "work", ("reflog", "show", "v1")),
    ("fsck", "work", ("fsck",)),
    ("fsck_json", "work", ("fsck", "--json")),
    ("remote_add", "work", ("remote", "add", "origin", "@tmp/remote")),
    ("remote_list", "work", ("remote",)),
    ("remote_json", "work", ("remote", "--json")),
    ("push", "work", ("push", "origin", "main")),
    ("push_json", "work", ("push", "origin", "merged", "--json")),
    ("push_again", "work", ("push", "origin", "main")),
    ("fetch_json", "work", ("fetch", "origin", "--json")),
    ("fetch", "work", ("fetch", "origin")),
    ("branch_all", "work", ("branch", "-a")),
    ("branch_remotes_json", "work", ("branch", "-r", "--json")),
    ("clone_json", ".", ("clone", "@tmp/remote", "copy", "--json")),
    ("clone_status", "copy", ("status",)),
    (None, "copy", ("config", "user.name", "Bo")),
    (None, "copy", ("config", "user.email", "bo@example.com")),
    (None, "work", ("checkout", "-b", "later", "main")),
    (None, "work", ("@model:later",)),
    (None, "work", ("add", "model/")),
    (None, "work", ("commit", "-m", "later")),
    ("push_later", "work", ("push", "origin", "later")),
    ("pull_json", "copy", ("pull", "origin", "later", "--json")),
    ("pull", "copy", ("pull", "origin", "later")),
    ("reset_json", "work", ("reset", "--soft", "main", "--json")),
    ("status_after_reset", "work", ("status",)),
    ("reset_hard", "work", ("reset", "--hard", "later")),
    ("checkout_paths", "work", ("checkout", "v1", "--", "model/config.json")),
    ("checkout_sparse_json", "work", ("checkout", "later", "--include", "model.layers.0.*", "--json")),
    ("status_sparse", "work", ("status",)),
    ("status_sparse_json", "work", ("status", "--json")),
    ("checkout_full", "work", ("checkout", "--full")),
    ("rm_cached", "work", ("rm", "--cached", "model/config.json")),
    ("status_rm_json", "work", ("status", "--json")),
    (None, "work", ("add", "model/config.json")),
    ("log_max_json", "work", ("log", "-n", "1", "--json")),
    ("branch_delete", "work", ("branch", "-D", "merged2")),
    ("tag_delete", "work", ("tag", "-d", "m1")),
    ("reflog_expire", "work", ("reflog", "expire", "--all")),
    ("gc", "work", ("gc", "--now")),
    ("fsck_after_gc", "work", ("fsck",)),
    ("clone_partial_json", ".", ("clone", "--partial", "@tmp/remote", "lazy", "--json")),
    ("fsck_partial", "lazy", ("fsck",)),
    ("fsck_partial_json", "lazy", ("fsck", "--json")),
    ("error_unknown_rev", "work", ("show", "nosuchrev")),
    ("error_usage", "work", ("diff", "a", "b", "c")),
    ("error_not_repo", ".", ("status",)),
]
CASES = [name for name, _, _ in SCRIPT if name]


def _models() -> dict[str, dict]:
    base = llama_state_dict(SPEC, seed=0)
    return {
        "base": base,
        "sft": frozen_finetune(base, {0}, seed=1),
        "exp2": frozen_finetune(base, {1}, seed=2),
        "later": frozen_finetune(base, {1}, seed=3),
    }


_HEX = re.compile(r"(?<![0-9a-f])(?:[0-9a-f]{64}|[0-9a-f]{40}|[0-9a-f]{12})(?![0-9a-f])")
_DATE = re.compile(r"\w{3} \w{3} \d{2} \d{2}:\d{2}:\d{2} \d{4} [+-]\d{4}")  # `log`/`show` dates
_STAMP = re.compile(r"\d{4}-\d{2}-\d{2} \d{2}:\d{2}")  # reflog times
_TIME = re.compile(r'("time": )\d+')  # JSON epoch seconds


def normalise(text: str, tmp: Path) -> str:
    """Replace what differs between runs: the temporary directory, dates and ids (a commit id
    hashes its time). Each distinct id becomes <idN> in order of first appearance; a 12-digit
    short id shares the number of the full id it abbreviates."""
    for root in {str(tmp.resolve()), str(tmp)}:
        text = text.replace(root, "<tmp>")
    text = _TIME.sub(r"\1<time>", text)
    text = _DATE.sub("<date>", text)
    text = _STAMP.sub("<date>", text)
    ids: dict[str, str] = {}
    return _HEX.sub(lambda m: ids.setdefault(m.group()[:12], f"<id{len(ids) + 1}>"), text)


def render(result: Result, tmp: Path) -> str:
    args = " ".join(a.replace(str(tmp), "<tmp>") for a in result.args)
    return normalise(
        f"$ mgit {args}\n[exit {result.exit_code}]\n--- stdout\n{result.stdout}--- stderr\n{result.stderr}", tmp
    )


def _commit_clock() -> types.SimpleNamespace:
    """A ``time`` module for the commit writer whose clock moves one minute per commit: the
    commits' order in `log` (by date, as git's) no longer depends on which fell in the same second."""
    ticks = itertools.count(1_700_000_000, 60)
    return types.SimpleNamespace(
        time=lambda: next(ticks), localtime=time.localtime, timezone=time.timezone, altzone=time.altzone
    )


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Run the script once; the rendered output of every named step."""
    import mgit.graph.objects
    from mgit.cli.state import stdout_console

    if stdout_console().is_terminal:  # the goldens are piped output: no colours, 240 columns
        pytest.skip("stdout is a terminal (pytest -s? FORCE_COLOR?): the CLI would colour its output")

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(mgit.graph.objects, "time", _commit_clock())
        return _run_script(tmp_path_factory.mktemp("golden"))


def _run_script(tmp: Path) -> dict[str, str]:
    (tmp / "work").mkdir()
    models = _models()
    got: dict[str, str] = {}
    for name, where, args in SCRIPT:
        cwd = tmp / where
        if args[0].startswith("@model:"):
            model = cwd / "model"
            write_model(model, models[args[0].removeprefix("@model:")], shards=2)
            for f in model.iterdir():
                touch_later(f)
            continue
        argv = [a.replace("@tmp", str(tmp)) for a in args]
        result = invoke(*argv, cwd=cwd)
        if name is None:
            result.check()
        else:
            got[name] = render(result, tmp)
    return got


@pytest.mark.parametrize("case", CASES)
def test_golden(outputs: dict[str, str], case: str) -> None:
    path = GOLDEN / f"{case}.txt"
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(outputs[case], encoding="utf-8")
    assert path.exists(), f"no golden file {path.name}: regenerate with MGIT_UPDATE_GOLDEN=1"
    expected = path.read_text(encoding="utf-8")
    if outputs[case] != expected:
        diff = difflib.unified_diff(expected.splitlines(), outputs[case].splitlines(), "golden", "now", lineterm="")
        pytest.fail(f"{case}: output differs from golden/{path.name}:\n" + "\n".join(diff), pytrace=False)


def test_every_golden_file_is_a_case():
    """A golden file whose case was removed from the script is stale."""
    assert sorted(p.stem for p in GOLDEN.glob("*.txt")) == sorted(CASES)
