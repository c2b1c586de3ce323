"""User-facing errors.

Every error a user can act on is an ``MgitError``: the CLI prints its message as one
line and exits non-zero, without a traceback unless ``--debug`` is given. Anything else
escaping the CLI is a bug in mgit.
"""


class MgitError(Exception):
    """An error with a one-line message saying what is wrong and what to do."""

    exit_code = 1


class NotARepositoryError(MgitError):
    """No mgit repository at or above the given path."""


class BadInputError(MgitError):
    """A file, path or argument that mgit refuses to take."""


class RevisionError(MgitError):
    """A revision that does not name a commit."""


class LockedError(MgitError):
    """Another live mgit process holds the repository lock."""


class DirtyWorktreeError(MgitError):
    """An operation would overwrite uncommitted changes."""


class CorruptObjectError(MgitError):
    """Stored data failed verification against its id."""


class RefUpdateError(MgitError):
    """A ref moved while we were working (compare-and-swap lost)."""


class RemoteError(MgitError):
    """A remote that cannot be reached, refuses us, or lacks what was asked for."""


class AuthError(RemoteError):
    """A remote refused our credentials (or we gave none)."""


class NonFastForwardError(RefUpdateError):
    """A push or pull that would discard commits on the other side."""
