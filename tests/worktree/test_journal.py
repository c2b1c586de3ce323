"""The journal (mgit.worktree.journal): what a killed operation's recovery reads back."""

from __future__ import annotations

import json
from pathlib import Path

from mgit.graph.snapshot import Entry
from mgit.worktree import journal
from mgit.worktree.journal import Journal, Staged, Write

FILE = Entry("blob", "1" * 40, 0o100644)
BASE = Entry("blob", "2" * 40, 0o100644)


def test_the_index_an_operation_ends_with_is_kept_and_read_back(tmp_path: Path) -> None:
    """A stash apply stages other entries than it writes (git's treatment): the journal keeps
    them, under its own schema, so an mgit that predates them refuses the journal instead of
    finishing the operation with the written entries staged."""
    staged = {"n.txt": Staged(BASE, "3" * 40), "new.txt": Staged(None)}
    plan = Journal("stash apply", "stash@{0}", "4" * 40, writes={"n.txt": Write(FILE, FILE)}, staged=staged)
    journal.save(tmp_path, plan)
    assert json.loads(journal.path_of(tmp_path).read_text())["schema"] == "mgit.journal/2"
    assert journal.load(tmp_path) == plan


def test_a_journal_without_staged_entries_keeps_the_first_schema(tmp_path: Path) -> None:
    plan = Journal("checkout", "b", "4" * 40, writes={"n.txt": Write(FILE, FILE)}, head="branch", branch="b")
    journal.save(tmp_path, plan)
    saved = json.loads(journal.path_of(tmp_path).read_text())
    assert saved["schema"] == "mgit.journal/1" and "staged" not in saved
    assert journal.load(tmp_path) == plan
