"""Git's three-way merge for models: two snapshots merged over their merge base, path by path,
a safetensors file tensor by tensor (manifest blobs taken as they are), a text file line by
line; what both sides changed differently is a conflict unless a resolution settles it
(docs/merging.md, "Merging branches (three-way)"). The operations around it (merge-base, fast
forwards, committing, the working tree, pull, revert) are mgit.ops.threeway."""
