"""Fixtures shared by the tests. Model factories and runners live in tests/helpers/
(``from helpers.models import ...``): nothing imports from conftest."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers.histories import Two, forked_history, pushed_and_cloned, small_llama, two_commits
from helpers.models import commit_model, llama_state_dict
from hypothesis import settings

from mgit import Repository

# Shared CI machines are noisy: no per-example deadlines.
settings.register_profile("mgit", deadline=None)
settings.load_profile("mgit")


@pytest.fixture
def repo(tmp_path: Path) -> Repository:
    r = Repository.init(tmp_path / "work")
    yield r
    r.close()


@pytest.fixture
def llama() -> dict:
    return llama_state_dict()


@pytest.fixture
def two(repo: Repository) -> Two:
    """Commits a and b on main (helpers.histories.two_commits)."""
    return two_commits(repo)


@pytest.fixture
def cloned(two: Two, tmp_path: Path):
    """``two`` pushed to a directory remote, and a clone of it."""
    with pushed_and_cloned(two, tmp_path) as made:
        yield made


@pytest.fixture
def forked(repo: Repository) -> tuple[Repository, str, str]:
    """main at b on a, branch side at a (helpers.histories.forked_history)."""
    return forked_history(repo)


@pytest.fixture
def forked_pushed(forked: tuple[Repository, str, str], tmp_path: Path) -> tuple[Repository, str, str, str]:
    """``forked``'s main pushed to a directory remote origin; its URL last."""
    repo, a, b = forked
    url = str(tmp_path / "remote.mgit")
    repo.remote_add("origin", url)
    repo.push()
    return repo, a, b, url


@pytest.fixture
def origin(repo: Repository, tmp_path: Path) -> tuple[Repository, str]:
    """A repository with one commit on main and a directory remote ``origin`` (empty yet)."""
    commit_model(repo, small_llama(0), "a")
    url = str(tmp_path / "remote.mgit")
    repo.remote_add("origin", url)
    return repo, url


@pytest.fixture
def renames(monkeypatch) -> list[tuple[str, bool]]:
    """Every os.replace in this process: (destination, whether a file already had its name)."""
    seen: list[tuple[str, bool]] = []
    real = os.replace

    def replace(src, dst, *args, **kwargs):
        seen.append((os.fsdecode(dst), os.path.lexists(dst)))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(os, "replace", replace)
    return seen


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3-protocol endpoint on 127.0.0.1 (moto's ThreadedMotoServer), stopped after the run."""
    from moto.server import ThreadedMotoServer

    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    yield f"http://{host}:{port}"
    server.stop()
