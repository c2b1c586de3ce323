"""`log --format` / `--pretty`: git's presets and placeholders, as plain text lines.

Presets: ``oneline`` (full id and subject), ``short``, ``medium`` (the default view), ``full``,
``fuller``; ``format:STRING``, ``tformat:STRING`` and any STRING holding a ``%`` are templates.
Placeholders (as git): ``%H %h`` commit id (``%h``: 12 digits, as mgit abbreviates),
``%T %t`` tree, ``%P %p`` parents, ``%s`` subject, ``%b`` body, ``%B`` raw message,
``%an %ae %ad %ar %at %ai %aI %as`` author name, email and date (default, relative, epoch,
ISO-like, strict ISO, short), the same with ``%c…`` for the committer, ``%d %D`` the ref
names as git decorates (``HEAD -> main, tag: v1, origin/main``; with and without `` (…)``),
``%n`` newline, ``%%``; anything else is printed as it stands.
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING

from mgit.errors import BadInputError

if TYPE_CHECKING:
    from mgit.graph.objects import CommitInfo

PRESETS = ("oneline", "short", "medium", "full", "fuller")
_PLACEHOLDER = re.compile(r"%(a[neadrtiIs]|c[neadrtiIs]|[HhTtPpsbBdDn%])")


@dataclass(frozen=True)
class LogFormat:
    """A preset's name, or a template (``template`` set)."""

    preset: str = "medium"
    template: str | None = None


def parse_format(spec: str) -> LogFormat:
    for prefix in ("format:", "tformat:"):
        if spec.startswith(prefix):
            return LogFormat("", spec[len(prefix) :])
    if spec in PRESETS:
        return LogFormat(spec)
    if "%" in spec:
        return LogFormat("", spec)
    raise BadInputError(f"invalid --format {spec!r}: a preset ({', '.join(PRESETS)}) or a template with %-placeholders")


def when(t: int, tz: int) -> str:
    """git's default date: ``Thu Apr 07 22:13:13 2005 +0200`` (mgit pads the day)."""
    return _local(t, tz).strftime("%a %b %d %H:%M:%S %Y %z")


def _local(t: int, tz: int) -> datetime:
    return datetime.fromtimestamp(t, timezone(timedelta(seconds=tz)))


def relative(t: int, now: int) -> str:
    """How long before ``now``, rounded as git's relative dates are: seconds up to 90,
    minutes up to 90, hours up to 36, days up to 14, weeks up to 10, months up to a year,
    then years and months up to 5 years, then years."""
    diff = now - t
    if diff < 0:
        return "in the future"

    def ago(n: int, unit: str) -> str:
        return f"{n} {unit}{'' if n == 1 else 's'} ago"

    if diff < 90:
        return ago(diff, "second")
    minutes = (diff + 30) // 60
    if minutes < 90:
        return ago(minutes, "minute")
    hours = (minutes + 30) // 60
    if hours < 36:
        return ago(hours, "hour")
    days = (hours + 12) // 24
    if days < 14:
        return ago(days, "day")
    if days < 70:
        return ago((days + 3) // 7, "week")
    if days < 365:
        return ago((days + 15) // 30, "month")
    if days < 1825:
        total = (days * 12 * 2 + 365) // (365 * 2)  # months, rounded
        years, months = divmod(total, 12)
        return ago(years, "year").removesuffix(" ago") + (f", {ago(months, 'month')}" if months else " ago")
    return ago((days + 183) // 365, "year")


def _subject_body(message: str) -> tuple[str, str]:
    """git's subject (the first paragraph, on one line) and body (the rest, as stored)."""
    head, _, rest = message.lstrip("\n").partition("\n\n")
    return " ".join(line.strip() for line in head.splitlines()), rest.lstrip("\n")


def _person(text: str) -> tuple[str, str]:
    """``Name <email>`` → (name, email)."""
    name, _, rest = text.partition("<")
    return name.strip(), rest.partition(">")[0]


def _dates(t: int, tz: int, now: int) -> dict[str, str]:
    local = _local(t, tz)
    return {
        "d": when(t, tz),
        "r": relative(t, now),
        "t": str(t),
        "i": local.strftime("%Y-%m-%d %H:%M:%S %z"),
        "I": local.isoformat(),
        "s": local.strftime("%Y-%m-%d"),
    }


def expand(template: str, c: CommitInfo, labels: list[str], now: int | None = None) -> str:
    """``template`` with git's placeholders filled in for commit ``c`` (``labels``: its refs)."""
    now = int(time.time()) if now is None else now
    subject, body = _subject_body(c.message)
    values = {
        "H": c.id,
        "h": c.id[:12],
        "T": c.tree,
        "t": c.tree[:12],
        "P": " ".join(c.parents),
        "p": " ".join(p[:12] for p in c.parents),
        "s": subject,
        "b": body,
        "B": c.message,
        "d": f" ({', '.join(labels)})" if labels else "",
        "D": ", ".join(labels),
        "n": "\n",
        "%": "%",
    }
    for key, person, t, tz in (
        ("a", c.author, c.author_time, c.author_timezone),
        ("c", c.committer, c.time, c.timezone),
    ):
        name, email = _person(person)
        values[f"{key}n"], values[f"{key}e"] = name, email
        values.update({f"{key}{k}": v for k, v in _dates(t, tz, now).items()})
    return _PLACEHOLDER.sub(lambda m: values[m.group(1)], template)


def preset_lines(preset: str, c: CommitInfo, deco: str) -> list[str]:
    """A preset's lines for one commit (plain text; ``deco``: `` (main, tag: v1)`` or "")."""
    if preset == "oneline":
        return [f"{c.id}{deco} {c.summary}"]
    lines = [f"commit {c.id}{deco}"]
    if len(c.parents) > 1:
        lines.append("Merge: " + " ".join(p[:12] for p in c.parents))
    if preset == "fuller":
        lines += [
            f"Author:     {c.author}",
            f"AuthorDate: {when(c.author_time, c.author_timezone)}",
            f"Commit:     {c.committer}",
            f"CommitDate: {when(c.time, c.timezone)}",
        ]
    else:
        lines.append(f"Author: {c.author}")
        if preset == "medium":
            lines.append(f"Date:   {when(c.author_time, c.author_timezone)}")
        if preset == "full":
            lines.append(f"Commit: {c.committer}")
    message = [c.summary] if preset == "short" else c.message.rstrip().splitlines()
    return [*lines, "", *(f"    {line}" for line in message), ""]
