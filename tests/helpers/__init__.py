"""Test helpers shared across test packages (importable as ``helpers`` since tests/ is on sys.path)."""
