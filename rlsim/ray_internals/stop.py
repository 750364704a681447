"""What ``ray stop`` says it did: how many Ray processes it stopped, and each one it could not
(another user's). Ray prints both from its CLI (``ray/scripts/scripts.py``) in words no API
promises; ``tests/unit/test_ray_internals.py`` reads them there on the installed Ray. A refusal
written in other words is counted (``unread``), never lost: the record says what it could not
read."""

from __future__ import annotations

import re

REFUSED = "Could not terminate"  # 'Could not terminate `{cmdline}` due to {psutil error}'
STOPPED = ("Stopped all", "Stopped only")  # 'Stopped all {n} Ray processes.', '... only {n} out of'
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_REFUSED = re.compile(r"Could not terminate .* due to \(pid=(\d+)(?:, name='([^']*)')?")
_STOPPED = re.compile(r"Stopped (?:all (\d+)|only (\d+) out of \d+) Ray processes")


def said(output: str) -> dict:
    """``ray stop``'s output read: ``stopped`` (how many it stopped), ``refused`` (each
    process it could not stop, ``{"pid", "name"}``, once each: it tries one process under
    several of its patterns) and ``unread`` (refusals it printed that name no pid here)."""
    text = _ANSI.sub("", output)
    stopped = next((int(a or b) for a, b in _STOPPED.findall(text)), 0)
    refused: dict[int, str] = {}
    unread = 0
    for line in text.splitlines():
        if REFUSED not in line:
            continue
        if found := _REFUSED.search(line):
            refused.setdefault(int(found[1]), found[2] or "")
        else:
            unread += 1
    return {"stopped": stopped, "refused": [{"pid": p, "name": n} for p, n in refused.items()],
            "unread": unread}
