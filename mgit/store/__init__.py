"""The chunk store: content-addressed, compressed tensor bytes."""
