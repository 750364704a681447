"""Root's programs (iptables, ip, mkfs.ext4) where the PATH rlsim inherits leaves them out: a
PATH from a user's shell, a CI job or whatever ran `ray start` often lacks the sbin folders,
and these programs live there on Debian."""

from __future__ import annotations

import os

SBIN = ("/usr/sbin", "/sbin")


def search_path(path: str | None = None) -> str:
    """``path`` (this process's PATH by default) with the sbin folders it lacks added last."""
    dirs = (os.environ.get("PATH", os.defpath) if path is None else path).split(os.pathsep)
    return os.pathsep.join(dirs + [d for d in SBIN if d not in dirs])
