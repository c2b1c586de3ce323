"""The package's shape (issue 13, docs/architecture.md): data moves down —
cli → repo → ops → context → {merge, diff, worktree, remote, maintenance} → model → {store, graph} —
nothing imports upward, no two packages import each other (directly or round a circle), and no
module passes 500 lines. Imports under ``if TYPE_CHECKING:`` are annotations only and not counted;
imports inside functions are (a lazy import is still a dependency)."""

from __future__ import annotations

import ast
from pathlib import Path

import mgit

ROOT = Path(mgit.__file__).parent

# Higher ranks may import lower ones (and their own package); never the reverse.
RANKS = {
    "": 8,  # mgit/__init__.py: the package's public names
    "__main__": 8,  # python -m mgit
    "cli": 7,
    "repo": 6,
    "ops": 5,
    "context": 4,
    "merge": 3,
    "diff": 3,
    "worktree": 3,
    "remote": 3,
    "maintenance": 3,
    "model": 2,
    "store": 1,
    "graph": 1,
}
UTILITY = 0  # errors, durable, lock, progress, …: importable by anyone


def _package(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ""


def _rank(package: str) -> int:
    return RANKS.get(package, UTILITY)


def _modules() -> dict[str, Path]:
    out = {}
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT.parent).with_suffix("")
        name = ".".join(rel.parts).removesuffix(".__init__")
        out[name] = path
    return out


def _type_checking_lines(tree: ast.Module) -> set[int]:
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for inner in node.body:
                lines.update(range(inner.lineno, (inner.end_lineno or inner.lineno) + 1))
    return lines


def _imports(module: str, path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    skip = _type_checking_lines(tree)
    found: set[str] = set()
    for node in ast.walk(tree):
        if getattr(node, "lineno", None) in skip:
            continue
        if isinstance(node, ast.Import):
            found |= {a.name for a in node.names if a.name.startswith("mgit")}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: resolve against this module's package
                pkg = module.split(".")[: -node.level] if not path.name == "__init__.py" else module.split(".")
                base = ".".join(pkg + ([base] if base else []))
            if base.startswith("mgit"):  # `from mgit import progress` imports the module mgit.progress
                subs = {f"{base}.{a.name}" for a in node.names} & MODULES
                found |= subs or {base}
    return found


MODULES = set(_modules())


def _edges() -> list[tuple[str, str]]:
    return [(m, t) for m, p in _modules().items() for t in _imports(m, p) if t != m]


def test_nothing_imports_upward() -> None:
    bad = [
        f"{m} imports {t}"
        for m, t in _edges()
        if _package(m) != _package(t) and _rank(_package(t)) > _rank(_package(m))
    ]
    assert not bad, "\n".join(bad)


def test_no_import_circle_between_packages() -> None:
    graph: dict[str, set[str]] = {}
    for m, t in _edges():
        a, b = _package(m), _package(t)
        if a != b and _rank(a) == _rank(b) != UTILITY:
            graph.setdefault(a, set()).add(b)
    circles = []
    for start in graph:  # a small graph: a walk from every node
        stack, seen = [(start, [start])], set()
        while stack:
            node, path = stack.pop()
            for nxt in graph.get(node, ()):
                if nxt == start:
                    circles.append(" → ".join([*path, start]))
                elif nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, nxt]))
    assert not circles, circles


def test_utilities_import_no_layer() -> None:
    bad = [f"{m} imports {t}" for m, t in _edges() if _rank(_package(m)) == UTILITY and _rank(_package(t)) > UTILITY]
    assert not bad, "\n".join(bad)


def test_no_module_passes_500_lines() -> None:
    long = {m: n for m, p in _modules().items() if (n := len(p.read_text().splitlines())) > 500}
    assert not long, long


def test_only_the_method_files_name_methods() -> None:
    """Nothing outside merge/methods/ branches on a merge method's name or class."""
    names = ("task_arithmetic", "ties", "dare_ties", "dare_linear", "della", "breadcrumbs", "slerp", "model_stock")
    bad = []
    for m, path in _modules().items():
        if m.startswith("mgit.merge.methods"):
            continue
        text = path.read_text()
        bad += [f"{m}: isinstance … {cls}" for cls in ("TaskArithmetic", "Linear", "Slerp") if f", {cls})" in text]
        for name in names:
            for quote in ('"', "'"):
                if f"== {quote}{name}{quote}" in text or f"startswith({quote}{name}" in text:
                    bad.append(f"{m}: compares a method name with {name!r}")
    assert not bad, bad
