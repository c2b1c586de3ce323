"""The porcelain as functions over a :class:`mgit.context.Context`, one module per job:
opening (open, init), stage (add, rm, commit), checkout (switch, restore, the budget), reset,
recover (finishing an interrupted journaled operation), inspect (status, log, show, diff,
tensors), refs (branches, tags, reflogs), merge (plan, merge; merge_inputs, lineage),
remotes (configuration, tracking refs, the promisor), sync (push, fetch, pull, clone),
maintain (gc, fsck, du). :class:`mgit.repo.Repository` is their facade; nothing here
imports it."""
