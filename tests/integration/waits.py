"""Waiting helpers the integration tests share (imported as ``waits``: pytest puts this folder on
``sys.path``)."""

from __future__ import annotations

import time


def wait_until(pred, timeout: float, what: str):
    """``pred()``'s first truthy value within ``timeout`` s, else TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.1)
    raise TimeoutError(f"{what} not reached in {timeout} s")


def alive(cluster) -> list[int]:
    """Indices of the nodes Ray sees alive."""
    return [n.index for n in cluster.nodes() if n.alive]
