"""What one pytest process shares between scenario items and tests: the strict switch that turns a
missing system part from a skip into a failure (CI), and the scenario session (the clusters kept
between scenarios, the twins, the decisions ``rlsim run`` makes the same way)."""

from __future__ import annotations

import os

import pytest

from rlsim.scenario.session import Session

STRICT_VAR = "RLSIM_STRICT"
SESSION = pytest.StashKey[Session]()


def scenario_session(config: pytest.Config) -> Session:
    """This process's scenario session, from the plugin's options (each xdist worker has its
    own, with its own kept clusters)."""
    if SESSION not in config.stash:
        config.stash[SESSION] = Session(
            backend=config.getoption("rlsim_backend"),
            ray_address=config.getoption("rlsim_ray_address"),
            slow=config.getoption("rlsim_slow"),
            allow_disruptive=config.getoption("rlsim_allow_disruptive"),
            reuse=not config.getoption("rlsim_no_reuse"),
            fresh_twin=config.getoption("rlsim_fresh_twin"))
    return config.stash[SESSION]


def close_session(config: pytest.Config) -> list[str]:
    """Stop the clusters this process's scenarios kept; what their teardown leaked."""
    session = config.stash.get(SESSION, None)
    return session.close() if session else []


def require(reason: str | None) -> None:
    """Skip the calling test when ``reason`` says a system part is missing; with RLSIM_STRICT=1
    (as in CI) fail instead, so a missing part never passes silently."""
    if reason is None:
        return
    if os.environ.get(STRICT_VAR) == "1":
        pytest.fail(f"{reason} (RLSIM_STRICT=1 turns this skip into a failure)")
    pytest.skip(reason)
