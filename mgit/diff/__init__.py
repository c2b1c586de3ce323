"""Diffs between model versions: which tensors changed and by how much."""
