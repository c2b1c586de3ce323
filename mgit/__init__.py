"""mgit: version control for model weights."""

from mgit.errors import MgitError
from mgit.repo import Repository
from mgit.version import __version__

__all__ = ["MgitError", "Repository", "__version__"]
