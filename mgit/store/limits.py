"""The format's size limit on a chunk, in a module of its own: chunking (model layer) and fsck
need the number without loading the codecs (numpy, zstd) that enforce it."""

# The largest raw chunk the format allows (docs/format.md §5: chunks are cut at 4 MiB). A record
# declaring more is refused before anything is decoded: a few KiB of zstd can claim a GiB.
MAX_CHUNK_BYTES = 4 * 2**20
