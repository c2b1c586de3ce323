"""Keeping a repository healthy: reachability, gc, fsck, du. Composes the graph, model
and store layers; the store itself only ever sees chunk ids."""
