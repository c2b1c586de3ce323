"""S3 remotes against a real S3-protocol endpoint on 127.0.0.1: moto's ThreadedMotoServer,
started once per run on a free port by conftest's ``s3_endpoint`` (not a mocked client)."""

from __future__ import annotations

import threading
import uuid

import boto3
import pytest
from helpers.models import commit_model, frozen_finetune, llama_state_dict, tree_hashes
from helpers.remotes import put_commits
from helpers.run import run_mgit

from mgit import Repository
from mgit.errors import NonFastForwardError, RemoteError
from mgit.remote.s3 import S3Backend


@pytest.fixture
def bucket(s3_endpoint, monkeypatch):
    env = {
        "AWS_ENDPOINT_URL": s3_endpoint,
        "AWS_ACCESS_KEY_ID": "test",
        "AWS_SECRET_ACCESS_KEY": "test",
        "AWS_DEFAULT_REGION": "us-east-1",
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    name = f"mgit-{uuid.uuid4().hex[:12]}"
    boto3.client("s3").create_bucket(Bucket=name)
    return name, env


@pytest.fixture
def work(tmp_path, bucket):
    repo = Repository.init(tmp_path / "work")
    base = llama_state_dict()
    commit_model(repo, base, "base")
    url = f"s3://{bucket[0]}/models/llama"
    repo.remote_add("origin", url)
    return repo, base, url, tmp_path


def test_push_clone_partial_round_trips(work):
    repo, base, url, tmp = work
    first = repo.push()
    commit_model(repo, frozen_finetune(base, {0, 1}, seed=3), "fine-tune")
    second = repo.push()
    assert 0 < second.chunks < first.chunks and second.present_chunks > 0
    assert repo.push().chunks == 0
    clone = Repository.clone(url, tmp / "clone")
    assert tree_hashes(clone.root) == tree_hashes(repo.root) and clone.fsck() == []
    partial = Repository.clone(url, tmp / "partial", partial=True)
    assert tree_hashes(partial.root) == tree_hashes(repo.root)


def test_concurrent_pushes_exactly_one_wins(work):
    repo, base, url, tmp = work
    repo.push()
    other = Repository.clone(url, tmp / "other")
    commit_model(repo, frozen_finetune(base, {0}, seed=6), "ours")
    commit_model(other, frozen_finetune(base, {1}, seed=7), "theirs")
    outcomes = []

    def go(r: Repository) -> None:
        try:
            r.push()
            outcomes.append("won")
        except NonFastForwardError:
            outcomes.append("lost")

    threads = [threading.Thread(target=go, args=(r,)) for r in (repo, other)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(outcomes) == ["lost", "won"]


def test_errors_and_cli(work, bucket):
    repo, _, _, tmp = work
    repo.remote_add("nobucket", "s3://no-such-bucket-here/x")
    with pytest.raises(RemoteError, match="does not exist"):
        repo.push("nobucket")
    run_mgit("push", "--json", cwd=repo.root, check=True, env=bucket[1])
    run_mgit("clone", f"s3://{bucket[0]}/models/llama", str(tmp / "cli"), cwd=tmp, check=True, env=bucket[1])
    assert tree_hashes(tmp / "cli") == tree_hashes(repo.root)
    bad = run_mgit("push", "nobucket", cwd=repo.root, env=bucket[1])
    assert bad.returncode != 0 and "does not exist" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("new", ["move", "delete"])
def test_a_ref_deleted_during_a_swap_loses_the_swap(bucket, new):
    """A ref deleted by another pusher between the swap's read and its conditional write: S3
    answers the write NoSuchKey (not PreconditionFailed), which is a lost swap, not an error."""
    backend = S3Backend(f"s3://{bucket[0]}/models/race")
    ids = put_commits(backend, 2)
    assert backend.swap_ref("refs/heads/main", None, ids[0])
    key, client = backend.prefix + "refs/heads/main", backend.client
    read = client.get_object

    def read_then_deleted(**kwargs):
        answer = read(**kwargs)
        if kwargs.get("Key") == key:
            client.delete_object(Bucket=kwargs["Bucket"], Key=key)  # the other pusher's delete
        return answer

    backend.client.get_object = read_then_deleted  # type: ignore[method-assign]
    assert not backend.swap_ref("refs/heads/main", ids[0], ids[1] if new == "move" else None)
    backend.client.get_object = read  # type: ignore[method-assign]
    assert "refs/heads/main" not in backend.refs()
