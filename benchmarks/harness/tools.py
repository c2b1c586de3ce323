"""The mgit under test and the peer tools, each peer in its own virtual environment.

Why: a benchmark must measure a fixed mgit (a commit exported into the workdir, so edits made
while it runs do not count) against peers installed the same way every time: DVC, ZipNN and
mergekit from PyPI into their own virtual environments (never the test environment), pinned by
the repository's ``constraints.txt`` (torch: any other spec pulls a multi-GB CUDA build);
git-lfs is the Debian package, detected, and skipped with the install command printed.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from harness.runner import Runner, place_model

REPO_ROOT = Path(__file__).resolve().parents[2]
CONSTRAINTS = REPO_ROOT / "constraints.txt"
BASELINES_VENV = REPO_ROOT / "bench-work" / ".venv-baselines"  # dvc and zipnn
MERGEKIT_VENV = REPO_ROOT / "bench-work" / ".venv-mergekit"
MERGEKIT_FLAGS = ("--no-cuda", "--no-lazy-unpickle", "--no-copy-tokenizer", "--quiet")


def tool_env(workdir: Path) -> dict[str, str]:
    """A fixed identity and no user/system git config, so runs do not depend on the host."""
    gitconfig = workdir / "gitconfig"
    gitconfig.write_text("[init]\n\tdefaultBranch = main\n")
    env = dict(os.environ)
    env.update(
        GIT_AUTHOR_NAME="bench",
        GIT_AUTHOR_EMAIL="bench@example.invalid",
        GIT_COMMITTER_NAME="bench",
        GIT_COMMITTER_EMAIL="bench@example.invalid",
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_CONFIG_NOSYSTEM="1",
        DVC_NO_ANALYTICS="1",
        DVC_SITE_CACHE_DIR=str(workdir / "dvc-site-cache"),
    )
    return env


def offline_env(workdir: Path) -> dict[str, str]:
    """tool_env for mergekit: no Hugging Face network access, its cache in the workdir."""
    env = tool_env(workdir)
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_HOME=str(workdir / "hf-home"))
    return env


def version_of(cmd: Sequence[str]) -> str | None:
    """The first version number a command prints (None when it fails)."""
    try:
        res = subprocess.run(list(cmd), capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        return None
    found = re.search(r"\d+\.\d+(\.\d+)?", res.stdout or res.stderr)
    return found.group(0) if found else "?"


def package_version(python: Path | str, name: str) -> str:
    """The installed version of package ``name`` in the environment of ``python``."""
    code = f"import importlib.metadata as m; print(m.version({name!r}))"
    return subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=True).stdout.strip()


# -- peer environments ----------------------------------------------------------------------


def ensure_venv(venv: Path) -> None:
    """A virtual environment for peer tools (created when missing)."""
    if not (venv / "bin" / "python").exists():
        print(f"creating {venv} for the baselines")
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)


def pip_install(venv: Path, *specs: str) -> None:
    """Install packages from PyPI into a peer environment (created when missing), under constraints.txt."""
    ensure_venv(venv)
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", "-c", str(CONSTRAINTS), *specs], check=True)


def ensure_dvc(venv: Path = BASELINES_VENV) -> str | None:
    """dvc in its own virtual environment (installed when missing); None when that fails."""
    dvc = venv / "bin" / "dvc"
    if dvc.exists():
        return str(dvc)
    try:
        ensure_venv(venv)
        print("installing dvc from PyPI into it")
        pip_install(venv, "dvc")
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"could not install dvc ({exc}); skipping the DVC baseline")
        return None
    return str(dvc)


def ensure_zipnn(venv: Path = BASELINES_VENV) -> str | None:
    """The baselines' python with zipnn importable (installed from PyPI when missing)."""
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import zipnn"]
    if python.exists() and subprocess.run(probe, capture_output=True).returncode == 0:
        return str(python)
    try:
        print("installing zipnn from PyPI into the baselines' environment")
        pip_install(venv, "zipnn")
    except (OSError, subprocess.CalledProcessError) as exc:
        print(f"could not install zipnn ({exc}); skipping the zipnn baseline")
        return None
    return str(python)


def ensure_mergekit(venv: Path = MERGEKIT_VENV) -> Path:
    """`mergekit-yaml` from PyPI in its own virtual environment (created when missing)."""
    exe = venv / "bin" / "mergekit-yaml"
    if not exe.exists():
        print(f"installing mergekit from PyPI into {venv}", flush=True)
        pip_install(venv, "mergekit")
    return exe


def mergekit_cmd(exe: Path, config: Path, out: Path, flags: Sequence[str] = ()) -> list[str]:
    return [str(exe), str(config), str(out), *MERGEKIT_FLAGS, *flags]


def git_lfs_version() -> str | None:
    """git-lfs's version when installed; otherwise None, after printing how to install it."""
    lfs = version_of(["git", "lfs", "version"])
    if not lfs:
        print("git-lfs is missing; skipping that baseline. Install it with:\n  apt-get install -y git-lfs")
    return lfs


# -- the mgit under test ----------------------------------------------------------------------


def mgit_command(workdir: Path, rev: str) -> tuple[list[str], str]:
    """(command prefix, label) for mgit as committed at ``rev``, or as installed for "worktree".

    A committed revision is exported into the workdir and run from there, so edits made to
    the working tree while the benchmark runs cannot change what is measured.
    """
    if rev == "worktree":
        installed = Path(sys.executable).with_name("mgit")
        return [str(installed) if installed.exists() else "mgit"], "working tree"
    sha = subprocess.run(
        ["git", "rev-parse", "--verify", f"{rev}^{{commit}}"], cwd=REPO_ROOT, capture_output=True, text=True, check=True
    ).stdout.strip()
    dest = workdir / f"mgit-{sha[:12]}"
    if not (dest / "mgit" / "__init__.py").exists():
        archive = subprocess.run(["git", "archive", sha, "mgit"], cwd=REPO_ROOT, capture_output=True, check=True)
        tmp = dest.with_name(dest.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        # compiled as pip compiles an installed package (the peers' are): otherwise, under
        # PYTHONDONTWRITEBYTECODE, every mgit command would compile its modules anew (~0.2 s)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(tmp / "mgit")], check=True)
        shutil.rmtree(dest, ignore_errors=True)
        os.replace(tmp, dest)
    # -P: without it ``-m`` puts the current directory first on sys.path, and run from this
    # repository's root that imports the working tree's mgit instead of the export.
    return ["env", f"PYTHONPATH={dest}", sys.executable, "-P", "-m", "mgit"], f"commit {sha[:12]}"


def mgit_label(mgit: list[str], where: str) -> str:
    """A report's Versions entry for mgit: "VERSION (where)"."""
    return f"{version_of([*mgit, '--version']) or '?'} ({where})"


def mgit_pythonpath(mgit: list[str]) -> str:
    """The PYTHONPATH under which the measured mgit imports ('' for the installed working tree)."""
    return next((a.split("=", 1)[1] for a in mgit if a.startswith("PYTHONPATH=")), "")


def python_prefix(mgit: list[str]) -> list[str]:
    """The interpreter (and environment) that runs the mgit under test."""
    return mgit[:-2] if mgit[-2:] == ["-m", "mgit"] else [sys.executable]


def script_child(mgit: list[str], code: str, *args: str) -> list[str]:
    """A ``python -c CODE ARGS`` command that imports the measured mgit and the benchmark scripts."""
    bench_dir = str(Path(__file__).resolve().parents[1])
    env_path = os.pathsep.join(p for p in (mgit_pythonpath(mgit), bench_dir) if p)
    return ["env", f"PYTHONPATH={env_path}", sys.executable, "-P", "-c", code, *args]  # -P: as mgit_command


def json_output(text: str) -> dict:
    """The JSON document a command printed (after any leading lines)."""
    return json.loads(text[text.index("{") :])


def commit_branches(runner: Runner, mgit: list[str], repo: Path, versions: Sequence[tuple[str, Path]]) -> None:
    """A fresh mgit repository holding ``(branch, model directory)`` pairs, the first on `main`, every
    other on its own branch made from `main`; `main` checked out at the end (all untimed)."""
    shutil.rmtree(repo, ignore_errors=True)
    repo.mkdir(parents=True)
    m = [*mgit, "-q"]
    runner.run([*m, "init"], repo)
    for i, (branch, src) in enumerate(versions):
        if i:
            runner.run([*m, "checkout", "-b", branch, "main"], repo)
        place_model(src, repo)
        runner.run([*m, "add", "model"], repo)
        runner.run([*m, "commit", "-m", branch], repo)
    runner.run([*m, "checkout", "main"], repo)


@dataclass
class Tools:
    mgit: list[str]  # command prefix running the mgit under test
    git_lfs: bool
    dvc: str | None
    versions: dict[str, str] = field(default_factory=dict)


def find_tools(workdir: Path, mgit_rev: str, with_dvc: bool, baselines_venv: Path = BASELINES_VENV) -> Tools:
    """The mgit under test, git-lfs when installed, and dvc (installed into ``baselines_venv``)."""
    mgit, where = mgit_command(workdir, mgit_rev)
    tools = Tools(mgit, False, None)
    tools.versions["mgit"] = mgit_label(mgit, where)
    tools.versions["git"] = version_of(["git", "--version"]) or "?"
    lfs = git_lfs_version()
    if lfs:
        tools.git_lfs = True
        tools.versions["git-lfs"] = lfs
    if with_dvc:
        tools.dvc = ensure_dvc(baselines_venv)
        if tools.dvc:
            tools.versions["dvc"] = version_of([tools.dvc, "--version"]) or "?"
    return tools


# -- servers ----------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def port_open(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
        return True
    except OSError:
        return False


def wait_for_port(port: int, limit: float = 30) -> None:
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        if port_open(port):
            return
        time.sleep(0.1)
    raise RuntimeError(f"mgit serve did not listen on port {port}")
