"""The Ray releases rlsim is proven on, and what rlsim knows of particular releases.

Plain data, standard library only, and nothing of rlsim: the Ray matrix (``ci/ray_matrix.py``)
loads this file by its path, without installing rlsim.
"""

from __future__ import annotations

# The Ray releases the matrix (ci/ray_matrix.py) runs; pyproject's range says the same.
SUPPORTED_TEXT = ">=2.48,<2.61"
TOKEN_AUTH_SINCE = "2.52"  # the first Ray release whose GCS checks RAY_AUTH_MODE=token
# the first Ray release whose dashboard starts its modules from a forkserver (before: spawned)
DASHBOARD_FORKSERVER_SINCE = "2.59"
# The first Ray release seen whose raylet keeps a detached actor's worker port from later drivers
# (2.48, 2.52 and 2.53 did not; 2.54, 2.55 and 2.60 do: the substrate's detach test on each)
DETACHED_PORTS_SINCE = "2.54"
