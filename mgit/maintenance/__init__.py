"""Keeping a repository healthy: reachability, gc, fsck, du. Composes the graph, model
and store layers; the store itself only ever sees chunk ids."""

DEFAULT_GRACE_SECONDS = 3600  # gc keeps unreferenced data younger than this (a write may be in flight)
