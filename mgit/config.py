"""Configuration files, read as git reads its own: a repository's ``.mgit/config``, then the
user's mgit file (``$XDG_CONFIG_HOME/mgit/config``, default ``~/.config/mgit/config``: what
``mgit config --global`` writes), then git's own user and system files (``~/.gitconfig``, …),
the first that sets a key winning. So ``user.name`` set for git serves mgit too, and mgit's
own global settings need no git. All files are git-config text (dulwich)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

from dulwich.config import ConfigFile, StackedConfig

from mgit.errors import BadInputError

Section = tuple[bytes, ...]


def global_path() -> Path:
    """The user's mgit configuration file (it may not exist yet)."""
    base = os.environ.get("XDG_CONFIG_HOME") or os.path.join(os.path.expanduser("~"), ".config")
    return Path(base) / "mgit" / "config"


def read_file(path: Path) -> ConfigFile:
    """A configuration file's content (empty when there is none yet)."""
    try:
        return ConfigFile.from_path(str(path))
    except FileNotFoundError:
        cfg = ConfigFile()
        cfg.path = str(path)
        return cfg


def stack(local: ConfigFile) -> StackedConfig:
    """What a repository reads: its own file, the user's mgit file, then git's files."""
    backends = [local]
    user = global_path()
    if user.is_file():
        backends.append(read_file(user))
    return StackedConfig(backends + StackedConfig.default_backends(), writable=local)


def split_key(key: str) -> tuple[Section, bytes]:
    """``section.name`` or ``section.subsection.name`` → (section, name), as git splits it
    (the subsection may hold dots: ``remote.my.host.url``)."""
    section, dot, name = key.partition(".")
    if not dot or not section or not name:
        raise BadInputError(f"config key {key!r} must look like section.name, e.g. user.name")
    sub, _, name = name.rpartition(".")
    return ((section.encode(), sub.encode()) if sub else (section.encode(),)), name.encode()


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
    return list(reversed(StackedConfig.default_backends()))


def global_get(key: str) -> str | None:
    """``mgit config --global KEY``: the user's mgit file only."""
    return get(read_file(global_path()), key)


def global_set(key: str, value: str) -> None:
    """``mgit config --global KEY VALUE``: written to the user's mgit file (created if need be)."""
    set_value(read_file(global_path()), key, value)


def global_entries() -> list[tuple[str, str, str]]:
    """("global", key, value) of every setting in the user's mgit file."""
    return [("global", k, v) for k, v in entries(read_file(global_path()))]
