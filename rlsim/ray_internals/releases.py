"""The Ray releases rlsim is proven on, and what rlsim knows of particular releases.

:data:`PROVEN` is the one edit that moves the supported range. The code reads it: the range rlsim
checks the installed Ray against (:func:`rlsim.ray_internals.version_problem`, ``rlsim doctor``),
and the Ray matrix (``ci/ray_matrix.py``), which loads this file by its path. What cannot read
Python (pyproject.toml's dependencies, README.md, the docs, the CI templates) is held to it by
``tests/unit/test_ray_range.py``, which names the file and the line to change.

Plain data, standard library only, and nothing of rlsim: the matrix reads it without installing
rlsim.
"""

from __future__ import annotations

# The first and the last Ray minor release rlsim is proven on, each run by the Ray matrix
PROVEN = ("2.48", "2.60")


def _next_minor(release: str) -> str:
    major, minor = release.split(".")[:2]
    return f"{major}.{int(minor) + 1}"


FIRST, LAST = PROVEN
BELOW = _next_minor(LAST)  # the first minor release not proven
SUPPORTED_TEXT = f">={FIRST},<{BELOW}"  # as pip reads it: ray[default]>=2.48,<2.61
SUPPORTED_WORDS = f"{FIRST} to {LAST}"  # as the docs say it

TOKEN_AUTH_SINCE = "2.52"  # the first Ray release whose GCS checks RAY_AUTH_MODE=token
# the first Ray release whose dashboard starts its modules from a forkserver (before: spawned)
DASHBOARD_FORKSERVER_SINCE = "2.59"
# The first Ray release seen whose raylet keeps a detached actor's worker port from later drivers
# (2.48, 2.52 and 2.53 did not; 2.54, 2.55 and 2.60 do: the substrate's detach test on each)
DETACHED_PORTS_SINCE = "2.54"
