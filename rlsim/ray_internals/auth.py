"""Who may talk to a cluster rlsim starts: a token where the installed Ray checks one
(``RAY_AUTH_MODE=token``, Ray 2.52 on), and, where it checks none, a refusal to start one as root
unless the user accepts that any local user can then run code as root.
"""

from __future__ import annotations

import os

from rlsim.ray_internals import installed
from rlsim.ray_internals.answers import available, status
from rlsim.ray_internals.releases import TOKEN_AUTH_SINCE
from rlsim.ray_internals.settings import ALLOW_OPEN_VAR, AUTH_MODE_VAR, AUTH_TOKEN_PATH_VAR


def token_auth() -> bool:
    """Whether clusters this Ray starts can check a token (and rlsim turns it on)."""
    return available("token_auth")


def connect_env(token_path: str) -> dict[str, str]:
    """What a process needs in its environment to talk to an rlsim cluster: the token settings
    where this Ray has token auth, nothing where it has none (an open cluster)."""
    return {AUTH_MODE_VAR: "token", AUTH_TOKEN_PATH_VAR: token_path} if token_auth() else {}


def open_cluster_line() -> str:
    """One line for a cluster no token protects: why, and what brings the protection."""
    st = status("token_auth")
    who = "root" if os.geteuid() == 0 else "you"
    return (f"this cluster is unauthenticated: any local process can connect to it and run code "
            f"as {who} (Ray {installed.ray_version()} has no token auth: {st.why}; "
            f"Ray {TOKEN_AUTH_SINCE} and later have it)")


def auth_refusal() -> str | None:
    """Why this process must not start a cluster: run as root on a Ray without token auth, the
    cluster would let every local user run code as root, unless ``RLSIM_ALLOW_UNAUTHENTICATED=1``
    says the user takes that risk. None: it may."""
    if token_auth() or os.geteuid() != 0:
        return None
    if os.environ.get(ALLOW_OPEN_VAR, "") in ("1", "true", "yes"):
        return None
    return (f"refusing to start a cluster as root on Ray {installed.ray_version()}: "
            f"{open_cluster_line()}. Fix: install Ray {TOKEN_AUTH_SINCE} or later (token auth), "
            f"run rlsim as an unprivileged user, or export {ALLOW_OPEN_VAR}=1 to accept that "
            "every local user can run code as root while the cluster runs")


def export_auth_env() -> None:
    """Put the token-auth settings into this process's environment, unless already set. Call it
    before anything imports ``ray``: Ray's C++ config reads ``RAY_AUTH_MODE`` once, when ``ray``
    is first imported, and a process that imported Ray without it can never connect to a
    token-auth cluster (the pytest plugin does this at start-up)."""
    from rlsim.host.home import auth_token_path

    for key, value in connect_env(str(auth_token_path())).items():
        os.environ.setdefault(key, value)
