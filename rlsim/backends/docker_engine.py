"""The Docker engine as rlsim's backends and reaper see it: whether one answers, a client, and
the labels that tie every container, network and volume to a cluster session and an rlsim home.
"""

from __future__ import annotations

from rlsim.host.home import home_id

LABEL = "rlsim.session"
HOME_LABEL = "rlsim.home"  # the rlsim home that made it: a reaper touches only its own home's


def labels(session: str, **extra: str) -> dict[str, str]:
    """The labels of every container, network and volume of ``session`` in this home."""
    return {LABEL: session, HOME_LABEL: home_id(), **extra}


def network_name(slot: int, home: str | None = None) -> str:
    """The bridge network of ``slot`` in this home (another home's slot has its own name)."""
    return f"rlsim-{home or home_id()}-slot{slot}"


def is_orphan(found: dict[str, str] | None, known_sessions: set[str], home: str) -> bool:
    """Whether a docker object with labels ``found`` is this home's and no state file knows it.
    Objects of another home (another user, another CI job) or without a home label are never
    orphans here."""
    found = found or {}
    return found.get(HOME_LABEL) == home and found.get(LABEL) not in known_sessions


def engine_problem() -> str | None:
    """None when a Docker engine answers, else why not (for skips and errors)."""
    try:
        import docker

        docker.from_env(timeout=5).ping()
    except ImportError:
        return "the docker SDK is not installed (pip install testcontainers)"
    except Exception as e:  # noqa: BLE001 - any failure to reach the engine is the answer
        return f"no Docker engine is reachable ({str(e).splitlines()[0][:120]}); start dockerd"
    return None


def docker_client():
    import docker

    return docker.from_env()
