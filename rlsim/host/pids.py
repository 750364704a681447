"""Whether a process exists, the standard library only (the device stand-in asks it in every
worker of a node, where nothing heavier of rlsim is loaded)."""

from __future__ import annotations

import os


def pid_alive(pid: int) -> bool:
    """Whether process ``pid`` exists (another user's counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
