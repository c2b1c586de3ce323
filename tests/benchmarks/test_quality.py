"""bench_quality.py: its generated tasks, and one end-to-end run at the --quick size (marked
``bench_smoke``) asserting nothing about accuracy beyond sanity: every full merge beats the base."""

from __future__ import annotations

import importlib
import json
import random
import sys
from pathlib import Path

import pytest

BENCH_DIR = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCH_DIR))

from harness import tasks  # noqa: E402

bench_quality = importlib.import_module("bench_quality")


def test_tasks_are_reproducible_and_use_every_class() -> None:
    for task in tasks.TASKS:
        first = task.examples(300, seed=0)
        assert first == task.examples(300, seed=0)
        assert first != task.examples(300, seed=1)
        assert {label for _, label in first} == set(range(task.classes))


def test_the_labels_say_what_the_sentences_say() -> None:
    rng = random.Random(5)
    for _ in range(200):
        text, label = tasks.comparison(rng)
        a, word, b = text.split()[0], text.split()[2], text.split()[4]
        assert label == int(int(a) > int(b) if word == "larger" else int(a) < int(b))
        text, label = tasks.sentiment(rng)
        positive = text.split()[-1] in tasks.POSITIVE
        assert label == int(positive != (" not " in text))
        text, label = tasks.roles(rng)
        assert label == int(" by the " not in text)
        text, label = tasks.topic(rng)
        first = text.split(" and then ")[0].split()
        assert sum(w in list(tasks.TOPICS.values())[label] for w in first) == 2


@pytest.mark.bench_smoke
def test_a_quick_run_end_to_end(tmp_path: Path, capsys) -> None:
    # 10 fine-tuning steps, not --quick's 40: fine-tuning is most of the run, and 10 already move each
    # expert far from the base (the full merge scored about 90% against the base's 61% when chosen)
    assert bench_quality.main(["--quick", "--steps", "10", "--workdir", str(tmp_path / "quality")]) == 0
    out = capsys.readouterr().out
    assert bench_quality.SECTION_TITLE in out
    assert "| task_arithmetic, --budget 10%, importance |" in out
    results = json.loads(out.strip().splitlines()[-1])
    assert results["schema"] == "mgit.bench_quality/1"
    by_label = {r["label"]: r for r in results["results"]}
    base = by_label["base (no merge)"]["average"]
    assert by_label["task_arithmetic, full merge"]["average"] > base
    budgeted = by_label["task_arithmetic, --budget 10%, importance"]
    full_read = by_label["task_arithmetic, full merge"]["expert_bytes"]
    assert 0 < budgeted["expert_bytes"] <= 0.1 * full_read * 1.0001  # the budget is never exceeded
    assert (tmp_path / "quality" / "bench_quality.svg").is_file()


def test_help_answers(capsys) -> None:
    """--help prints the options (a '%' in a help text once made argparse raise instead)."""
    with pytest.raises(SystemExit) as exc:
        bench_quality.main(["--help"])
    assert exc.value.code == 0
    assert "--steps" in capsys.readouterr().out
