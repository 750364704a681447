"""Ray's session directory under a node's temp dir, laid out as Ray's private node code lays it
out: where the node's daemons write their logs, and how long the paths of its unix sockets get,
which bounds how long a node's directory may be.

Ray's logging docs name ``session_latest/logs`` and its files; the sockets' folder and names
they do not. Whoever starts Ray's nodes asks here whether their directories leave Ray room for
its sockets (the home, ``rlsim.host.home``, knows nothing of Ray's layout).
"""

from __future__ import annotations

from pathlib import Path

LATEST = "session_latest"  # a link to the node's current session
RAYLET_LOGS = ("raylet.err", "raylet.out")
GCS_LOGS = ("gcs_server.err", "gcs_server.out")  # the head's only

# What Ray adds under a node's temp dir for its longest unix socket: the head's dashboard modules
# listen on "<session dir>/sockets/dash_<module>" (dash_TaskEventsHead is the longest name in
# Ray 2.60; one more byte of room), and the session dir holds the head's pid (up to 7 digits).
SOCKET_TAIL = len("/session_2026-01-01_00-00-00_000000_4194304/sockets/") + 20
SOCKET_PATH_MAX = 107  # AF_UNIX sun_path on Linux, less its terminating NUL


def daemon_logs(temp_dir: Path, *, gcs: bool) -> list[Path]:
    """The log files of the node whose temp dir is ``temp_dir``: its raylet's, and with ``gcs``
    (the head) its GCS's, in that order; each may not be there yet."""
    logs = temp_dir / LATEST / "logs"
    return [logs / name for name in (*RAYLET_LOGS, *(GCS_LOGS if gcs else ()))]


def socket_path_problem(node_dir: Path) -> str | None:
    """Why Ray could not bind its sockets under ``node_dir`` (too long a path), or None."""
    from rlsim.host.home import rlsim_home

    longest = len(str(node_dir).encode()) + SOCKET_TAIL
    if longest <= SOCKET_PATH_MAX:
        return None
    return (f"Ray's unix sockets under {node_dir} would be {longest} bytes long, over the "
            f"{SOCKET_PATH_MAX} a socket path may have: set RLSIM_HOME to a shorter directory "
            f"(at most {len(str(rlsim_home()).encode()) - longest + SOCKET_PATH_MAX} bytes)")
