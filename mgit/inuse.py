"""Whether another process holds a file open or mapped, as far as ``/proc`` shows.

Why: a merge may patch a working file in place instead of replacing it (mgit.model.materialize).
A process that has the old model open or memory-mapped (an evaluation reading it lazily, a
notebook holding safetensors' mmap) would then see the new bytes under it, half patched while
the patch runs; a replaced file keeps the old inode for it. So a file another process holds is
replaced, never patched. Only this user's processes can be looked at (others' ``/proc`` entries
are not readable); where there is no ``/proc`` at all, every file counts as held.
"""

from __future__ import annotations

import os


def held_elsewhere(st: os.stat_result, proc: str = "/proc") -> bool:
    """Whether a process other than this one maps the file ``st`` describes or has it open."""
    if not os.path.isdir(os.path.join(proc, "self", "fd")):
        return True  # cannot tell
    mapped_dev = f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}"
    inode = str(st.st_ino)
    me = str(os.getpid())
    for entry in os.scandir(proc):
        if not entry.name.isdigit() or entry.name == me:
            continue
        try:
            if _maps(os.path.join(entry.path, "maps"), mapped_dev, inode) or _opens(os.path.join(entry.path, "fd"), st):
                return True
        except OSError:  # another user's process, or one that just ended
            continue
    return False


def _maps(path: str, dev: str, inode: str) -> bool:
    with open(path) as f:
        for line in f:
            fields = line.split(None, 5)  # address perms offset dev inode [path]
            if len(fields) >= 5 and fields[4] == inode and fields[3] == dev:
                return True
    return False


def _opens(fd_dir: str, st: os.stat_result) -> bool:
    for fd in os.scandir(fd_dir):
        try:
            target = os.stat(fd.path)
        except OSError:
            continue
        if (target.st_ino, target.st_dev) == (st.st_ino, st.st_dev):
            return True
    return False
