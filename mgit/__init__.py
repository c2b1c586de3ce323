"""mgit: version control for model weights."""

from mgit.errors import MgitError
from mgit.repo import Repository

__version__ = "0.1.0"
__all__ = ["MgitError", "Repository", "__version__"]
