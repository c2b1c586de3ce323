"""Model merging: the merge math (``methods``), numerically equal to mergekit's, one output tensor at a time."""
