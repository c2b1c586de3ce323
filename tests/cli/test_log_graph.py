"""`log --graph` draws the real topology (issue 39, defect 4): each commit once, an edge to each
of its parents, siblings on parallel lanes, merges of K+1 parents included.

Every drawing is read back by a small reader of the glyphs (``read_graph``) into the commits'
edges, which must be the true parents; and the order and the lane of each commit must be git's
own, compared with `git log --graph` on the same commits (the glyphs themselves are mgit's)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from helpers.cli import invoke
from helpers.models import LlamaSpec, commit_model, frozen_finetune, llama_state_dict
from hypothesis import given, settings
from hypothesis import strategies as st

from mgit import Repository
from mgit.cli.views.graph import Lanes
from mgit.ops.history import graph_order, rewrite_parents

GIT = shutil.which("git")
needs_git = pytest.mark.skipif(GIT is None, reason="git is not installed")
ID = re.compile(r"[0-9a-f]{7,40}")
GLYPHS = re.compile(r"[ |*/\\_.-]*")


@dataclass
class Drawing:
    order: list[tuple[str, int]] = field(default_factory=list)  # (commit, its lane), top to bottom
    edges: dict[str, set[str | None]] = field(default_factory=dict)  # None: an edge off the bottom


def read_graph(lines: list[str]) -> Drawing:  # noqa: C901 (a glyph-by-glyph parser of the drawing)
    """The commits and edges a drawing shows, from its glyphs alone. Points are (row boundary,
    lane); each glyph joins a point above to one below; a commit's edges are followed down to
    the next commits. Fails on a glyph fed by nothing (an edge out of nowhere)."""
    rows: list[tuple[str, str | None]] = []
    for line in lines:
        glyphs = GLYPHS.match(line).group(0)  # the text beside them starts with no glyph
        m = ID.search(line, len(glyphs)) if "*" in glyphs else None
        rows.append((glyphs, m.group(0) if m else None))
    down: dict[tuple[int, int], set[tuple[int, int]]] = {}
    commits: dict[tuple[int, int], str] = {}  # the point above a commit's '*' → the commit
    starts: dict[str, list[tuple[int, int]]] = {}
    for r, (g, commit) in enumerate(rows):
        for x, ch in enumerate(g):
            src = dst = None
            if ch == "|":
                src, dst = (r, x // 2), (r + 1, x // 2)
            elif ch == "\\":
                src, dst = (r, x // 2), (r + 1, x // 2 + 1)
            elif ch == "/":
                y = x - 2
                while y >= 1 and g[y] == "_":
                    y -= 2
                src, dst = (r, x // 2 + 1), (r + 1, (y + 1) // 2)
            elif ch == "*":
                assert commit is not None and x % 2 == 0, (r, g)
                commits[(r, x // 2)] = commit
                outs = [(r + 1, x // 2)]
                y = x + 1
                while y < len(g) and g[y] in "-.":
                    if y % 2 == 0:
                        outs.append((r + 1, y // 2))
                    y += 1
                starts[commit] = outs
            else:
                assert ch in " _-.", (r, g)
            if src is not None and dst is not None:
                down.setdefault(src, set()).add(dst)
    fed = {p for targets in down.values() for p in targets} | {p for outs in starts.values() for p in outs}
    for src in down:
        assert src in fed or src in commits or src[0] == 0, f"an edge out of nowhere at {src}: {lines}"
    drawing = Drawing()
    for (_, k), commit in sorted(commits.items()):
        assert commit not in drawing.edges, f"{commit} drawn twice"
        drawing.order.append((commit, k))
        reached: set[str | None] = set()
        todo, seen = list(starts[commit]), set()
        while todo:
            point = todo.pop()
            if point in seen:
                continue
            seen.add(point)
            if point in commits:
                reached.add(commits[point])
            elif point in down:
                todo += down[point]
            elif point not in starts[commit]:  # a lane that goes on below the drawing
                reached.add(None)
        drawing.edges[commit] = reached
    return drawing


def draw(order: list[str], parents: dict[str, tuple[str, ...]]) -> list[str]:
    lanes = Lanes()
    out: list[str] = []
    for c in order:
        out += lanes.place(c, parents[c]).lines([c])
    return out


@st.composite
def dags(draw_: st.DrawFn) -> dict[str, tuple[str, ...]]:
    """Random histories: commit k's parents are earlier commits (up to 5: merges of K+1)."""
    n = draw_(st.integers(1, 24))
    parents: dict[str, tuple[str, ...]] = {}
    for k in range(n):
        earlier = [f"{j:07x}" for j in range(k)]
        chosen = draw_(st.lists(st.sampled_from(earlier), max_size=5, unique=True)) if earlier else []
        parents[f"{k:07x}"] = tuple(chosen)
    return parents


@settings(max_examples=150, deadline=None)
@given(dags())
def test_every_edge_is_drawn_to_its_parent_and_nothing_else(parents):
    walked = list(reversed(parents))  # newest first
    order = graph_order(walked, parents)
    drawing = read_graph(draw(order, parents))
    assert [c for c, _ in drawing.order] == order
    assert drawing.edges == {c: set(parents[c]) for c in parents}


def test_a_merge_of_k_plus_one_parents_puts_the_experts_on_parallel_lanes():
    parents = {"b0b0b0b": (), "e1e1e1e": ("b0b0b0b",), "e2e2e2e": ("b0b0b0b",), "e3e3e3e": ("b0b0b0b",)}
    parents["aaaaaaa"] = ("b0b0b0b", "e1e1e1e", "e2e2e2e", "e3e3e3e")
    lines = draw(graph_order(list(reversed(parents)), parents), parents)
    assert lines == [
        "*---.  aaaaaaa",
        "|\\ \\ \\",
        "| | | * e3e3e3e",
        "|_|_|/",
        "| | * e2e2e2e",
        "|_|/",
        "| * e1e1e1e",
        "|/",
        "* b0b0b0b",
    ]


def test_parents_cut_off_by_max_count_leave_their_lanes_open():
    parents = {"b0b0b0b": (), "e1e1e1e": ("b0b0b0b",), "e2e2e2e": ("b0b0b0b",)}
    parents["aaaaaaa"] = ("b0b0b0b", "e1e1e1e", "e2e2e2e")
    order = graph_order(list(reversed(parents)), parents)[:2]
    drawing = read_graph(draw(order, parents))
    assert drawing.order == [("aaaaaaa", 0), ("e2e2e2e", 2)]
    assert drawing.edges == {"aaaaaaa": {"e2e2e2e", None}, "e2e2e2e": {None}}


def test_hidden_commits_hand_their_edges_to_the_nearest_shown_ancestors():
    parents = {"a": (), "b": ("a",), "c": ("b",), "d": ("b",), "m": ("c", "d"), "x": ("m",)}
    walked = ["x", "m", "d", "c", "b", "a"]
    shown = ["x", "c", "a"]  # m, d, b filtered out (say, by a path)
    assert rewrite_parents(shown, set(walked), parents.__getitem__) == {"x": ("c", "a"), "c": ("a",), "a": ()}
    assert rewrite_parents(["m", "c"], {"m", "c", "d"}, parents.__getitem__) == {"m": ("c",), "c": ()}


# -- against git itself -------------------------------------------------------------------------


def _git(git_dir: Path, *args: str, env: dict[str, str] | None = None) -> str:
    assert GIT is not None
    return subprocess.run(
        [GIT, "--git-dir", str(git_dir), *args], check=True, capture_output=True, text=True, env=env
    ).stdout


def _git_graph(git_dir: Path, *revs: str) -> list[tuple[str, int]]:
    """Each commit of `git log --graph` and the lane of its '*'."""
    out = []
    for line in _git(git_dir, "log", "--graph", "--format=%H", *revs).splitlines():
        m = ID.search(line)
        if m:
            out.append((m.group(0), line.index("*") // 2))
    return out


def _true_parents(git_dir: Path, *revs: str) -> dict[str, tuple[str, ...]]:
    lines = _git(git_dir, "log", "--format=%H %P", *revs).splitlines()
    return {h: tuple(ps) for h, *ps in (line.split() for line in lines)}


SHAPES = {  # name → commits in creation order: (name, parents)
    "octopus": [("b", ()), ("e1", ("b",)), ("e2", ("b",)), ("e3", ("b",)), ("m", ("b", "e1", "e2", "e3"))],
    "wide-octopus": [("b", ())] + [(f"e{k}", ("b",)) for k in range(8)] + [("m", ("b", *(f"e{k}" for k in range(8))))],
    "criss-cross": [
        ("a", ()),
        ("b", ("a",)),
        ("c", ("a",)),
        ("m1", ("b", "c")),
        ("m2", ("c", "b")),
        ("t", ("m1", "m2")),
    ],
    "merge-of-merges": [
        ("b", ()),
        ("x", ("b",)),
        ("y", ("b",)),
        ("m1", ("b", "x", "y")),
        ("z", ("x",)),
        ("m2", ("m1", "z", "y")),
        ("w", ("m2",)),
    ],
}


def _build(git_dir: Path, shape: list[tuple[str, tuple[str, ...]]]) -> dict[str, str]:
    subprocess.run([GIT, "init", "-q", "--bare", str(git_dir)], check=True)
    tree = subprocess.run(
        [GIT, "--git-dir", str(git_dir), "mktree"], input="", check=True, capture_output=True, text=True
    ).stdout.strip()
    ids: dict[str, str] = {}
    for k, (name, parents) in enumerate(shape):
        when = f"{1_700_000_000 + 60 * k} +0000"
        env = {**os.environ, "GIT_AUTHOR_DATE": when, "GIT_COMMITTER_DATE": when}
        env |= {
            "GIT_AUTHOR_NAME": "a",
            "GIT_AUTHOR_EMAIL": "a@x",
            "GIT_COMMITTER_NAME": "a",
            "GIT_COMMITTER_EMAIL": "a@x",
        }
        args = [arg for p in parents for arg in ("-p", ids[p])]
        ids[name] = _git(git_dir, "commit-tree", tree, *args, "-m", name, env=env).strip()
        _git(git_dir, "update-ref", f"refs/heads/{name}", ids[name])
    return ids


@needs_git
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_order_and_lanes_are_gits(tmp_path, shape):
    git_dir = tmp_path / "g.git"
    _build(git_dir, SHAPES[shape])
    for revs in ([SHAPES[shape][-1][0]], ["--all"]):
        parents = _true_parents(git_dir, *revs)
        walked = list(parents)  # git's date order: what mgit's walk gives
        ours = read_graph(draw(graph_order(walked, parents), parents))
        assert ours.order == _git_graph(git_dir, *revs), (shape, revs)
        assert ours.edges == {c: set(ps) for c, ps in parents.items()}


SPEC = LlamaSpec(layers=2, hidden=16, intermediate=32, vocab=32)


@pytest.fixture
def merged(repo: Repository) -> Repository:
    """main: a base; three experts on branches; `merged`: their task-arithmetic merge (4 parents);
    `later`: one more commit on math."""
    base = llama_state_dict(SPEC)
    commit_model(repo, base, "base")
    for k, name in enumerate(("math", "code", "chat")):
        repo.checkout("main")
        repo.checkout(create_branch=name)
        commit_model(repo, frozen_finetune(base, [set(), {0}, {1}][k], seed=k + 1), f"{name} tuned")
    repo.checkout("main")
    invoke(
        "merge",
        "math",
        "code",
        "chat",
        "--method",
        "task_arithmetic",
        "--weights",
        "0.5,0.3,0.2",
        "-b",
        "merged",
        "--no-checkout",
        "-m",
        "merge three",
        "--seed",
        "1",
        cwd=repo.root,
        check=True,
    )
    return repo


@needs_git
def test_mgit_log_graph_shows_what_git_log_graph_shows(merged):
    root = merged.root
    proc = invoke("log", "--graph", "--oneline", "merged", cwd=root, check=True)
    lines = proc.stdout.splitlines()
    notes = [line for line in lines if " + " in line or "merge (task_arithmetic)" in line]
    assert len(notes) == 4 and "+ math" in notes[1] and "× 0.5" in notes[1]  # mgit's extras stay
    ours = read_graph(lines)
    git_dir = root / ".mgit"
    assert ours.order == [(c[:12], k) for c, k in _git_graph(git_dir, "merged")]
    truth = _true_parents(git_dir, "merged")
    assert ours.edges == {c[:12]: {p[:12] for p in ps} for c, ps in truth.items()}
    assert len(truth[merged.resolve("merged")]) == 4
    full = read_graph(invoke("log", "--graph", "merged", cwd=root, check=True).stdout.splitlines())
    assert full.order == [(c, k) for c, k in _git_graph(git_dir, "merged")]
    assert full.edges == {c: set(ps) for c, ps in truth.items()}
