"""Shell completion (click's: `_MGIT_COMPLETE=bash_source mgit`, or `mgit completion bash`):
the callbacks offering branch, tag, remote-tracking branch and remote names, and the
`completion` command printing the script."""

from __future__ import annotations

from collections.abc import Callable

import click

from mgit.errors import MgitError
from mgit.repo import Repository

Completer = Callable[[click.Context, "click.Parameter | None", str], list[str]]


def _names_for_completion(ctx: click.Context, kinds: tuple[str, ...]) -> list[str]:
    """Branch, tag, remote-tracking branch or remote names of the repository ``-C`` names; none
    outside a repository (completion never fails)."""
    directory = ctx.find_root().params.get("directory") or "."
    try:
        with Repository(directory) as repo:
            found: dict[str, Callable[[], list[str]]] = {
                "branch": lambda: list(repo.branches()),
                "tag": lambda: list(repo.tags()),
                "remote_branch": lambda: list(repo.remote_branches()),
                "remote": lambda: list(repo.remotes()),
                "head": lambda: ["HEAD"],
            }
            return [name for kind in kinds for name in sorted(found[kind]())]
    except (MgitError, OSError):
        return []


def _completer(*kinds: str) -> Completer:
    """A click ``shell_complete`` callback offering the names of ``kinds`` that start as typed."""

    def complete(ctx: click.Context, param: click.Parameter | None, incomplete: str) -> list[str]:
        return [n for n in _names_for_completion(ctx, kinds) if n.startswith(incomplete)]

    return complete


complete_rev = _completer("branch", "tag", "remote_branch", "head")
complete_branch = _completer("branch")
complete_tag = _completer("tag")
complete_remote = _completer("remote")


@click.command("completion")
@click.argument("shell", type=click.Choice(["bash", "zsh", "fish"]))
@click.pass_context
def cmd_completion(ctx: click.Context, shell: str) -> None:
    """Print the shell completion script for SHELL: `eval "$(mgit completion bash)"` (see the guide)."""
    from click.shell_completion import get_completion_class

    complete = get_completion_class(shell)
    assert complete is not None  # click ships all three
    click.echo(complete(ctx.find_root().command, {}, "mgit", "_MGIT_COMPLETE").source())
