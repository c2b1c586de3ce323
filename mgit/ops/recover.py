"""Finishing what a killed or interrupted command left in the journal: run each time the
lock is taken (the context's ``on_lock``), it removes the temporary files the command left
beside the working files it names, then rolls the operation forward, or says how to finish
or undo it by hand."""

from __future__ import annotations

import os

from mgit.context import Context
from mgit.errors import MgitError
from mgit.lock import warn
from mgit.model.placing import remove_temporaries
from mgit.ops import checkout, workfiles
from mgit.ops.workfiles import CheckoutResult, WorkForm, finish_command, undo_command
from mgit.worktree import journal
from mgit.worktree.journal import Journal


def recover(ctx: Context) -> None:
    """Finish the operation a killed or interrupted command left in the journal (run when
    the lock is taken). If it cannot be finished, say how to finish or undo it by hand."""
    plan = journal.load(ctx.git_dir)
    if plan is None:
        return
    try:
        for p in plan.writes:
            remove_temporaries(ctx.root / p)
    except OSError as exc:
        warn(f"could not remove what the interrupted {plan.describe()} left beside its files ({exc})")
        return
    if not plan.roll_forward:
        journal.clear(ctx.git_dir)
        warn(f"the interrupted {plan.describe()} was not finished: run it again")
        return
    warn(f"finishing the interrupted {plan.describe()}")
    try:
        finish(ctx, plan)
    except (MgitError, OSError) as exc:
        undo = f" or `{undo_command(plan)}` to undo it" if plan.old_head else ""
        warn(
            f"could not finish the interrupted {plan.describe()} ({exc}); "
            f"run `{finish_command(plan)}` to finish it{undo}"
        )


def finish(ctx: Context, plan: Journal) -> None:
    """Roll a journaled operation forward: write what is not written yet, then complete it."""
    index = ctx.index()
    todo = {p: w.entry for p, w in plan.writes.items()}
    forms = {p: WorkForm(w.form, w.written) for p, w in plan.writes.items()}
    done = {p for p, form in forms.items() if form.written and workfiles.holds(ctx, p, form, index)}
    for p in done:
        index.set(p, todo[p], os.stat(ctx.root / p), projection=forms[p].projection(todo[p]))
    result = CheckoutResult(plan.target)
    unwritten = {p: e for p, e in todo.items() if p not in done}
    checkout.write_files(ctx, index, unwritten, result, forms=forms, removes=plan.removes, resumed=True)
    workfiles.complete(ctx, plan, index, result, clear=not plan.switch_after)
    if plan.switch_after:  # the journal stays until the switch's own journal replaces it
        assert plan.branch is not None
        try:
            checkout.switch(ctx, plan.branch, None, force=False)
        except MgitError:
            left = journal.load(ctx.git_dir)
            if left is not None and left.op == plan.op:  # refused before writing anything
                journal.clear(ctx.git_dir)
            raise
