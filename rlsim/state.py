"""The machine-wide registry of rlsim clusters: one JSON state file per cluster, guarded by a lock.

Slot allocation happens under an exclusive ``flock`` so that pytest-xdist workers starting clusters
at the same moment get different slots. A cluster whose owner is gone (and that was not detached,
or whose processes are all gone) is abandoned: its slot is reclaimed and its leftovers reaped.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import secrets
from collections.abc import Iterator
from pathlib import Path

from rlsim import procs
from rlsim.net.alloc import pick_slot
from rlsim.spec import ClusterSpec, ClusterState, rlsim_home


def clusters_dir() -> Path:
    d = rlsim_home() / "clusters"
    d.mkdir(parents=True, exist_ok=True)
    return d


def state_path(name: str) -> Path:
    return clusters_dir() / f"{name}.json"


@contextlib.contextmanager
def locked() -> Iterator[None]:
    """Hold the machine-wide rlsim lock (a blocking ``flock``) for the duration of the block."""
    home = rlsim_home()
    home.mkdir(parents=True, exist_ok=True)
    with open(home / "lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def auth_token_path() -> Path:
    """The token every rlsim cluster on this machine requires (created once, mode 0600).

    One token per machine, not per cluster: Ray's C++ token loader caches the token per process,
    so a test process talking to two rlsim clusters must present the same one.
    """
    path = rlsim_home() / "auth_token"
    if not path.exists():
        with locked():
            if not path.exists():
                tmp = path.with_suffix(".tmp")
                fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
                with os.fdopen(fd, "w") as fh:
                    fh.write(secrets.token_hex(32))
                os.replace(tmp, path)
    return path


def load(name: str) -> ClusterState | None:
    path = state_path(name)
    try:
        return ClusterState.model_validate_json(path.read_text())
    except FileNotFoundError:
        return None


def load_all() -> list[ClusterState]:
    states = []
    for path in sorted(clusters_dir().glob("*.json")):
        try:
            states.append(ClusterState.model_validate_json(path.read_text()))
        except (OSError, ValueError):
            continue
    return states


def save(state: ClusterState) -> None:
    path = state_path(state.spec.name)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(state.model_dump_json(indent=2))
    os.replace(tmp, path)


def remove(name: str) -> None:
    state_path(name).unlink(missing_ok=True)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def is_abandoned(state: ClusterState, live_sessions: set[str]) -> bool:
    """True when no one will ever tear this cluster down: its owner process is gone and it was
    not detached (a crashed test or CLI: its processes, if any, are leaks), or it was detached and
    none of its processes runs any more."""
    if _pid_alive(state.owner_pid):
        return False
    return not state.detached or state.session not in live_sessions


def reserve(spec: ClusterSpec, backend: str, detached: bool) -> ClusterState:
    """Reserve a slot and write the state file for a new cluster named ``spec.name``.

    Raises RuntimeError naming the fix when a live cluster already has that name or all slots are
    taken. Abandoned clusters give their slot back; the caller reaps their leftovers first
    through :func:`abandoned`.
    """
    with locked():
        live = procs.sessions()
        taken = set()
        for other in load_all():
            if other.spec.name == spec.name and not is_abandoned(other, live):
                raise RuntimeError(
                    f"an rlsim cluster named {spec.name!r} is already running "
                    f"(slot {other.slot}): pick another --name or run `rlsim down {spec.name}`"
                )
            if not is_abandoned(other, live):
                taken.add(other.slot)
        state = ClusterState(
            spec=spec,
            slot=pick_slot(taken),
            session=f"{spec.name}-{secrets.token_hex(4)}",
            backend=backend,
            owner_pid=os.getpid(),
            detached=detached,
        )
        save(state)
        return state


def abandoned() -> list[ClusterState]:
    """Clusters that no one will tear down (see :func:`is_abandoned`)."""
    live = procs.sessions()
    return [s for s in load_all() if is_abandoned(s, live)]
