"""The mgit version (its own module so every layer can record it without import cycles)."""

__version__ = "0.1.0"
