"""Every use rlsim makes of Ray's private surface, in one place, each a named capability with a
probe.

Ray promises nothing of ``ray._private``, ``ray._raylet``, ``ray.core.generated``, its raw gRPC
methods, its undocumented ``RAY_`` settings or the command lines it builds: any release may rename
them, and Ray ignores a setting it no longer knows without a word. rlsim leans on them for speed
(nodes that start in a fraction of Ray's own time, workers forked warm) and for a few things Ray's
public API cannot do without a driver (read the GCS's tables, drain a node with a deadline). So:

- only this package touches that surface; ``tests/unit/test_layers.py`` fails on any other use
  in rlsim or the reference trainer;
- each use is a :class:`Capability` (:mod:`.capabilities`) whose probe (:mod:`.probes`) reads
  the installed Ray's files (:mod:`.installed`: a module, a function's parameters, a message in
  a generated proto, a setting compiled into ``_raylet.so``) without importing Ray and without a
  cluster;
- where a probe fails, rlsim takes Ray's plain path (Ray's own worker set-up, agents and waits,
  no warm workers, Ray's own CLI), slower but with the same verdicts, and the timeline, ``rlsim
  doctor`` and ``rlsim ray`` say which were in force and why not (:mod:`.answers`). A capability
  marked ``required`` has no plain path: rlsim says so in one line, with the Ray version, instead
  of a traceback.

``RLSIM_RAY_PLAIN=all`` (every acceleration: what only saves time) or a comma-separated list of
capability names (``token_auth`` among them, to rehearse a Ray without it) takes the plain path on
purpose: to compare bring-up both ways, or to rehearse an older Ray's behaviour on this one.

The modules, by what they know of Ray:

- :mod:`.releases`: the releases rlsim is proven on, and what it knows of particular ones;
- :mod:`.settings`: the names of the settings the annex sets, Ray's and rlsim's own;
- :mod:`.installed`, :mod:`.probes`, :mod:`.capabilities`, :mod:`.answers`: the probes, and
  which capabilities are in force;
- :mod:`.auth`: token authentication; :mod:`.tuning`: Ray's settings rlsim tunes;
- :mod:`.nodes`: the head's resource, and how a node's processes read in ``/proc``;
  :mod:`.session`: a node's session directory (its logs, its sockets);
- :mod:`.gcs`: the GCS's tables and raw RPCs; :mod:`.launch`, :mod:`.worker_setup`,
  :mod:`.node_agent`, :mod:`.forkserver`: a simulated node's start; :mod:`.train`: Ray Train's
  callbacks.

Importing this package loads only the standard library and ``packaging``; Ray is imported by the
functions that need it, never at import.
"""

from __future__ import annotations

from rlsim.ray_internals.answers import (
    RECORD_NAME,
    RayInternalsError,
    available,
    cluster_report,
    probe,
    record_note,
    require,
    status,
    statuses,
    summary,
)
from rlsim.ray_internals.auth import (
    auth_refusal,
    connect_env,
    export_auth_env,
    open_cluster_line,
    token_auth,
)
from rlsim.ray_internals.capabilities import AUTH_CLIENT, BY_NAME, CAPABILITIES, Capability, Status
from rlsim.ray_internals.installed import (
    SUPPORTED_RAY,
    RaySurface,
    detached_actors_problem,
    ray_version,
    surface,
    version_problem,
)
from rlsim.ray_internals.releases import (
    DASHBOARD_FORKSERVER_SINCE,
    DETACHED_PORTS_SINCE,
    SUPPORTED_TEXT,
    SUPPORTED_WORDS,
    TOKEN_AUTH_SINCE,
)
from rlsim.ray_internals.settings import (
    ALL_FLAGS,
    ALLOW_OPEN_VAR,
    CONNECT_FLAGS,
    HEALTH_FLAGS,
    NO_IDLE_FLAGS,
    PLAIN_VAR,
    PRELOAD_FLAGS,
    QUIET_FLAGS,
    RECONNECT_FLAGS,
)
from rlsim.ray_internals.tuning import driver_env, flag_env, health_check_env, init_from

__all__ = [
    "ALLOW_OPEN_VAR", "ALL_FLAGS", "AUTH_CLIENT", "BY_NAME", "CAPABILITIES", "CONNECT_FLAGS",
    "Capability", "DASHBOARD_FORKSERVER_SINCE", "DETACHED_PORTS_SINCE", "HEALTH_FLAGS",
    "NO_IDLE_FLAGS", "PLAIN_VAR", "PRELOAD_FLAGS", "QUIET_FLAGS", "RECONNECT_FLAGS",
    "RECORD_NAME", "RayInternalsError", "RaySurface", "SUPPORTED_RAY", "SUPPORTED_TEXT",
    "SUPPORTED_WORDS", "Status", "TOKEN_AUTH_SINCE", "auth_refusal", "available",
    "cluster_report", "connect_env", "detached_actors_problem", "driver_env",
    "export_auth_env", "flag_env", "health_check_env", "init_from", "open_cluster_line",
    "probe", "ray_version", "record_note", "require", "status", "statuses", "summary",
    "surface", "token_auth", "version_problem",
]
