"""The working tree: index with stat cache, ignore rules, status."""
