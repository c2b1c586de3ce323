"""The object graph on dulwich: blobs, trees, commits, refs, revisions."""
