"""The package's shape (docs/architecture.md): data moves down —
cli → repo → ops → context → {merge, diff, worktree, remote, maintenance} → model → {store, graph}
→ the utilities — nothing imports upward and no two packages import each other round a circle.
The rules are import-linter contracts in pyproject.toml (``lint-imports`` runs them in CI);
this test runs the same contracts, so the README's one test command checks the layering too.
What import-linter cannot say (a rule on the source text, not on imports) stays a test here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import mgit

ROOT = Path(mgit.__file__).parent
LINT_IMPORTS = "from importlinter.cli import lint_imports_command; lint_imports_command()"


def test_the_import_contracts_hold() -> None:
    """Every contract of pyproject.toml's [tool.importlinter] is kept. ``lint-imports`` runs in a
    process of its own: in this one it would reconfigure logging and prepend to sys.path."""
    lint = [sys.executable, "-c", LINT_IMPORTS, "--config", "pyproject.toml", "--no-cache"]
    proc = subprocess.run(lint, cwd=ROOT.parent, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_only_the_method_files_name_methods() -> None:
    """Nothing outside merge/methods/ branches on a merge method's name or class."""
    names = ("task_arithmetic", "ties", "dare_ties", "dare_linear", "della", "breadcrumbs", "slerp", "model_stock")
    bad = []
    for path in sorted(ROOT.rglob("*.py")):
        module = ".".join(path.relative_to(ROOT.parent).with_suffix("").parts)
        if module.startswith("mgit.merge.methods"):
            continue
        text = path.read_text()
        bad += [f"{module}: isinstance … {cls}" for cls in ("TaskArithmetic", "Linear", "Slerp") if f", {cls})" in text]
        for name in names:
            for quote in ('"', "'"):
                if f"== {quote}{name}{quote}" in text or f"startswith({quote}{name}" in text:
                    bad.append(f"{module}: compares a method name with {name!r}")
    assert not bad, bad
