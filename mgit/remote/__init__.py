"""Remotes: one object-store abstraction (backend.py) with directory, HTTP and S3 backends,
the transfers that move commits and chunks between a repository and a remote (transfer.py),
and the HTTP server (server.py)."""
