"""The porcelain as functions over a :class:`mgit.context.Context`, one module per job:
stage (add, rm, commit), checkout (switch, restore, the budget), reset, recover (finishing
an interrupted journaled operation), inspect (status, log, show, diff, tensors), refs
(branches, tags, reflogs), maintain (gc, fsck, du). :class:`mgit.repo.Repository` is their
facade; nothing here imports it."""
