"""What one pytest process shares between scenario items and tests: the strict switch that turns a
missing system part from a skip into a failure (CI), and the clusters kept between scenarios."""

from __future__ import annotations

import os

import pytest

from rlsim.scenario.pool import Pool

STRICT_VAR = "RLSIM_STRICT"
POOL = pytest.StashKey[Pool]()


def scenario_pool(config: pytest.Config) -> Pool:
    """This process's clusters kept between scenarios (each xdist worker has its own)."""
    if POOL not in config.stash:
        config.stash[POOL] = Pool(reuse=not config.getoption("rlsim_no_reuse"),
                                  fresh_twin=config.getoption("rlsim_fresh_twin"))
    return config.stash[POOL]


def close_pool(config: pytest.Config) -> list[str]:
    pool = config.stash.get(POOL, None)
    return pool.close() if pool else []


def require(reason: str | None) -> None:
    """Skip the calling test when ``reason`` says a system part is missing; with RLSIM_STRICT=1
    (as in CI) fail instead, so a missing part never passes silently."""
    if reason is None:
        return
    if os.environ.get(STRICT_VAR) == "1":
        pytest.fail(f"{reason} (RLSIM_STRICT=1 turns this skip into a failure)")
    pytest.skip(reason)
