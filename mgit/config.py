"""Configuration files, read as git reads its own: a repository's ``.mgit/config``, then the
user's mgit file (``$XDG_CONFIG_HOME/mgit/config``, default ``~/.config/mgit/config``: what
``mgit config --global`` writes), then git's own user and system files (``~/.gitconfig``, …),
the first that sets a key winning. So ``user.name`` set for git serves mgit too, and mgit's
own global settings need no git. All files are git-config text (dulwich).

Keys are checked as git checks them before anything is written (a key git cannot read back
would break every later command), and a file that cannot be parsed (edited by hand) is named
in one line with its bad line, as git names it, so the user knows what to fix."""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import TypeVar

from dulwich.config import ConfigFile, StackedConfig

from mgit.errors import BadInputError

Section = tuple[bytes, ...]
T = TypeVar("T")
_SECTION = re.compile(r"[A-Za-z0-9-]+")  # git's section names (a subsection holds the rest)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9-]*")  # git's variable names


def global_path() -> Path:
    """The user's mgit configuration file (it may not exist yet)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "mgit" / "config"


def read_file(path: Path) -> ConfigFile:
    """A configuration file's content (empty when there is none yet); one that cannot be
    parsed is refused in one line naming the file and its bad line."""
    try:
        return ConfigFile.from_path(str(path))
    except FileNotFoundError:
        cfg = ConfigFile()
        cfg.path = str(path)
        return cfg
    except ValueError as exc:
        raise BadInputError(_bad_file(path, exc)) from None


def checked(path: Path, read: Callable[[], T]) -> T:
    """``read()``, which parses the configuration file ``path`` (dulwich opening a repository,
    or reading its config): a parse error of that file is refused as :func:`read_file` refuses
    it; any other error is left as it is."""
    try:
        return read()
    except ValueError:
        read_file(path)
        raise


def _bad_file(path: Path, exc: ValueError) -> str:
    line = _bad_line(Path(path).read_bytes())
    if line is None:
        return f"bad config file {path} ({exc}): fix or delete the bad line in an editor"
    return f"bad config line {line} in file {path} ({exc}): fix or delete that line in an editor"


def _bad_line(data: bytes) -> int | None:
    """The number of the first line at which ``data`` stops parsing (the first prefix that
    fails), as git reports a bad config line; None for a large file (not searched)."""
    lines = data.splitlines(keepends=True)
    if len(lines) > 2000:
        return None
    for n in range(1, len(lines) + 1):
        try:
            ConfigFile.from_file(io.BytesIO(b"".join(lines[:n])))
        except ValueError:
            return n
    return None


def stack(local: ConfigFile) -> StackedConfig:
    """What a repository reads: its own file, the user's mgit file, then git's files."""
    backends = [local]
    user = global_path()
    if user.is_file():
        backends.append(read_file(user))
    return StackedConfig(backends + _git_backends(), writable=local)


def _git_backends() -> list[ConfigFile]:
    """git's user and system files, highest precedence first (dulwich finds them)."""
    try:
        return StackedConfig.default_backends()
    except ValueError as exc:
        raise BadInputError(
            f"git's configuration cannot be read ({exc}); `git config --list --show-origin` names the file to fix"
        ) from None


def split_key(key: str) -> tuple[Section, bytes]:
    """``section.name`` or ``section.subsection.name`` → (section, name), as git splits it
    (the subsection may hold dots: ``remote.my.host.url``). Refused as git refuses it: a
    section of letters, digits and ``-``; a name starting with a letter (then letters, digits,
    ``-``); a subsection without a newline or NUL; so every key written can be read back."""
    section, dot, rest = key.partition(".")
    sub, inner, name = rest.rpartition(".")
    if not dot or not section:
        raise BadInputError(f"config key {key!r} has no section: it must look like section.name, e.g. user.name")
    if not name:
        raise BadInputError(f"config key {key!r} has no name: it must look like section.name, e.g. user.name")
    wrong = _key_problem(section, sub, name)
    if wrong is not None:
        raise BadInputError(f"invalid config key {key!r}: {wrong}")
    return ((section.encode(), sub.encode()) if inner else (section.encode(),)), name.encode()


def _key_problem(section: str, sub: str, name: str) -> str | None:
    if not _SECTION.fullmatch(section):
        return f"the section {section!r} may hold only letters, digits and '-'"
    if not _NAME.fullmatch(name):
        return f"the name {name!r} must start with a letter, then letters, digits and '-'"
    if "\n" in sub or "\0" in sub:
        return "the subsection may hold no newline or NUL"
    return None


def get(cfg: ConfigFile | StackedConfig, key: str) -> str | None:
    section, name = split_key(key)
    try:
        return cfg.get(section, name).decode()
    except KeyError:
        return None


def set_value(cfg: ConfigFile, key: str, value: str) -> None:
    """Set ``key`` in a configuration file and write it (a git lock file, then a rename)."""
    section, name = split_key(key)
    cfg.set(section, name, value.encode())
    assert cfg.path is not None
    Path(os.fsdecode(cfg.path)).parent.mkdir(parents=True, exist_ok=True)
    cfg.write_to_path()


def entries(cfg: ConfigFile) -> Iterator[tuple[str, str]]:
    """Every ``key=value`` of a file, in its order, the key as git lists it (section and name
    lower-case, a subsection as written)."""
    for section in cfg.sections():
        head = ".".join([section[0].decode().lower(), *(s.decode() for s in section[1:])])
        for name, value in cfg.items(section):
            yield f"{head}.{name.decode().lower()}", value.decode(errors="replace")


def git_files() -> list[ConfigFile]:
    """git's own configuration files that exist, system first (lowest precedence first)."""
    return list(reversed(_git_backends()))


def global_get(key: str) -> str | None:
    """``mgit config --global KEY``: the user's mgit file only."""
    return get(read_file(global_path()), key)


def global_set(key: str, value: str) -> None:
    """``mgit config --global KEY VALUE``: written to the user's mgit file (created if need be)."""
    set_value(read_file(global_path()), key, value)


def global_entries() -> list[tuple[str, str, str]]:
    """("global", key, value) of every setting in the user's mgit file."""
    return [("global", k, v) for k, v in entries(read_file(global_path()))]
