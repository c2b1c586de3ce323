"""User-facing errors: every error a user can act on is an ``MgitError``, printed as one line with
its documented exit code (docs/guide.md, "Errors"; the table: docs/design.md, "Notes from the
code"). Anything else escaping the CLI is a bug in mgit (exit 1). A finer error subclasses a
coarser one, so code catching the coarser one keeps working.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


class MgitError(Exception):
    """An error with a one-line message saying what is wrong and what to do."""

    exit_code = 1


class NotARepositoryError(MgitError):
    """No mgit repository at or above the given path."""

    exit_code = 10


class BadInputError(MgitError):
    """A file, path or argument that mgit refuses to take."""

    exit_code = 2


class UnknownMethodError(BadInputError):
    """A merge method mgit does not know."""


class UnknownParameterError(BadInputError):
    """A parameter the named merge method does not take."""


class BudgetExceededError(BadInputError):
    """An operation would read or fetch more than its budget allows; nothing was changed.
    (A BadInputError too, as it was before it had its own exit code: the budget given is too small.)"""

    exit_code = 3


class RevisionError(MgitError):
    """A revision that does not name a commit."""


class LockedError(MgitError):
    """Another live mgit process holds the repository lock."""

    exit_code = 11


class DirtyWorktreeError(MgitError):
    """An operation would overwrite uncommitted changes."""

    exit_code = 4


class CorruptObjectError(MgitError):
    """Stored data failed verification against its id."""


class DamagedChunkError(CorruptObjectError):
    """A chunk the store cannot read as its id says: ``why`` is what is wrong. The store does not
    know what the chunk belongs to; the caller that does names it (:meth:`name_owner`, or
    :func:`chunks_of` around its reads). ``at``: the offset of the file being written where the
    chunk goes, set by the writer, so that the code knowing that file's layout names the tensor."""

    def __init__(self, cid: str, why: str, owner: str = "", at: int | None = None):
        self.cid, self.why, self.owner, self.at = cid, why, owner, at
        super().__init__(self._message())

    def _message(self) -> str:
        return f"chunk {self.cid[:12]}{f' of {self.owner}' if self.owner else ''} {self.why}"

    def name_owner(self, owner: str) -> None:
        """Name what the chunk is of (a tensor, a file) in the message, unless named already."""
        if owner and not self.owner:
            self.owner = owner
            self.args = (self._message(),)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.cid, self.why, self.owner, self.at))


@contextmanager
def chunks_of(owner: str) -> Iterator[None]:
    """Inside, a damaged chunk's error names ``owner`` (a tensor, a file) as what the chunk is of,
    unless code nearer the read named it already: the code that knows what it reads says so once,
    around its reads, and the one line the user sees names both the chunk and its owner."""
    try:
        yield
    except DamagedChunkError as exc:
        exc.name_owner(owner)
        raise


class MergeVerifyError(MgitError):
    """A merge commit that ``merge --verify`` computed again from its plan record differently
    (``Repository.verify_merge`` returns the comparison; the command raises this after it)."""

    exit_code = 6


class NotRecomputableError(MgitError):
    """A merge whose plan record does not say enough to compute it again (an older mgit's record
    of sketches, a sketch replaced since): ``merge --verify`` cannot tell either way."""


class RefUpdateError(MgitError):
    """A ref moved while we were working (compare-and-swap lost)."""


class RemoteError(MgitError):
    """A remote that cannot be reached, refuses us, or lacks what was asked for."""


class AuthError(RemoteError):
    """A remote refused our credentials (or we gave none)."""


class NonFastForwardError(RefUpdateError):
    """A push or pull that would discard commits on the other side."""


class MergeConflictError(MgitError):
    """A three-way merge (``merge``, ``pull``, ``revert``) in which both sides changed the same
    tensor, metadata key or lines of a file differently: nothing was committed, no ref moved and
    the working tree and index are as they were. ``report`` is the outcome naming every conflict
    (mgit.ops.threeway.BranchMerge), for the CLI to list."""

    exit_code = 5

    def __init__(self, message: str, report: Any = None):
        super().__init__(message)
        self.report = report
