"""How a Ray node shows itself where Ray's API says nothing: the resource only the head holds, and
a node's processes as ``/proc`` shows them (the raylet's and the GCS's executables, the titles
Ray gives its workers and agents, the flags on its daemons' command lines).

Ray builds each in its private code (``ray._common.constants``, ``ray._private.ray_constants``,
``ray._private.services``), which any release may change; ``tests/unit/test_ray_internals.py``
reads them there on the installed Ray. Pure functions over a process's name and argv: they judge
a snapshot of ``/proc`` taken elsewhere and signal nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

# The resource Ray gives the head node only: how the trainer and the harness tell the head apart
HEAD_RESOURCE = "node:__internal_head__"

RAYLET = "raylet"  # the raylet's executable: its process name, and argv[0]'s last part
GCS_SERVER = "gcs_server"  # the GCS's executable
WORKER_SCRIPT = "default_worker.py"  # what a worker's interpreter runs before it retitles itself
TITLE_PREFIX = "ray::"  # a worker's retitled argv[0]: ray::<Actor>.<method>, ray::IDLE
AGENT_TITLES = ("ray::DashboardAgent", "ray::RuntimeEnvAgent")  # the raylet's children, no workers
IDLE_TITLE = "ray::IDLE"  # a worker waiting for a task or an actor
# object spilling's workers (ray::IDLE_SpillWorker, ray::SPILL_SpillWorker, ...): no one's work
IO_WORKER_NAMES = ("SpillWorker", "RestoreWorker")
NODE_ID_FLAGS = ("--node_id", "--node-id")  # the raylet's own node (the second: other releases)
GCS_PORT_FLAG = "--gcs_server_port"
NODE_IP_FLAGS = ("--node-ip-address", "--node_ip_address")  # where the GCS says it listens


def flag(cmdline: Sequence[str], *names: str) -> str | None:
    """The value of ``NAME=value`` on ``cmdline`` for the first of ``names`` found (each name
    with its dashes: ``--node_id``)."""
    for arg in cmdline:
        for name in names:
            if arg.startswith(f"{name}="):
                return arg.split("=", 1)[1]
    return None


def is_raylet(name: str, cmdline: Sequence[str], node_id: str) -> bool:
    """The process (``name``, its comm; ``cmdline``, its argv) is the raylet of ``node_id``."""
    exe = cmdline[0].rsplit("/", 1)[-1] if cmdline else ""
    return RAYLET in (name, exe) and flag(cmdline, *NODE_ID_FLAGS) == node_id


def is_gcs_server(name: str, cmdline: Sequence[str], port: int, hosts: frozenset[str]) -> bool:
    """The process is the GCS serving ``port`` at one of ``hosts`` (where its command line names
    an address): another cluster's GCS on the same host serves another port or address."""
    return (name == GCS_SERVER and flag(cmdline, GCS_PORT_FLAG) == str(port)
            and flag(cmdline, *NODE_IP_FLAGS) in {None, *hosts})


def work_of(cmdline: Sequence[str]) -> str | None:
    """What a Ray worker that runs tasks and actors is doing, by its title: ``""`` while it
    waits for work (``ray::IDLE``), else its title (``ray::Worker.setup``); None for any other
    process (the raylet's agents, object spilling's workers, a worker not yet retitled, no
    worker at all)."""
    title = next(iter(cmdline[0].split(maxsplit=1)), "") if cmdline else ""
    if not title.startswith(TITLE_PREFIX) or title in AGENT_TITLES or \
            title.endswith(IO_WORKER_NAMES):
        return None
    return "" if title == IDLE_TITLE else title


def is_worker(name: str, cmdline: Sequence[str]) -> bool:
    """The process is a Ray worker: retitled ``ray::...`` (not one of the raylet's agents), or an
    interpreter still running ``default_worker.py`` before it retitles itself (a wrapper that
    merely passes that script on, ``sh wrap.sh default_worker.py``, is not the worker)."""
    title = cmdline[0] if cmdline else name
    if title.startswith(TITLE_PREFIX):
        return title.split(maxsplit=1)[0] not in AGENT_TITLES
    return len(cmdline) > 1 and cmdline[1].endswith(WORKER_SCRIPT)
