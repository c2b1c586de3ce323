"""mgit: version control for model weights."""

from typing import TYPE_CHECKING

from mgit.errors import MgitError
from mgit.version import __version__

if TYPE_CHECKING:
    from mgit.repo import Repository


def __getattr__(name: str) -> object:
    """``mgit.Repository``, imported when first asked for: ``import mgit.cli`` (every command's
    start) does not open the graph machinery until a command needs a repository."""
    if name == "Repository":
        from mgit.repo import Repository

        return Repository
    raise AttributeError(f"module 'mgit' has no attribute {name!r}")


__all__ = ["MgitError", "Repository", "__version__"]
