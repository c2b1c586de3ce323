"""Safetensors parsing and rebuild, chunking, manifests: files ↔ chunks + manifests."""
