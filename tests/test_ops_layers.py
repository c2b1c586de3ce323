"""The operations layer imports nothing above it: mgit.ops and mgit.context never import the
facade (mgit.repo), its mixins or the cli, and the context imports no operation (issue 13's
"data moves down")."""

from __future__ import annotations

import ast
from pathlib import Path

import mgit

ROOT = Path(mgit.__file__).parent
ABOVE_OPS = ("mgit.repo", "mgit.merging", "mgit.sync", "mgit.cli")


def _imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _above(name: str, layers: tuple[str, ...]) -> bool:
    return any(name == layer or name.startswith(layer + ".") for layer in layers)


def test_ops_import_neither_the_facade_nor_the_cli() -> None:
    modules = sorted((ROOT / "ops").glob("*.py"))
    assert modules
    for path in modules:
        bad = sorted(n for n in _imports(path) if _above(n, ABOVE_OPS))
        assert not bad, f"{path.name} imports {bad}"


def test_the_context_imports_no_operation() -> None:
    bad = sorted(n for n in _imports(ROOT / "context.py") if _above(n, (*ABOVE_OPS, "mgit.ops")))
    assert not bad, f"context.py imports {bad}"


def test_no_ops_module_passes_500_lines() -> None:
    for path in [ROOT / "context.py", *sorted((ROOT / "ops").glob("*.py"))]:
        assert len(path.read_text().splitlines()) <= 500, path.name
