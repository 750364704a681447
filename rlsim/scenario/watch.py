"""What Ray itself says while a trainer runs, whatever the trainer: nodes declared dead and actors
that died, read from the cluster's GCS (no driver) and recorded as rlsim's own timeline events.

``ray_node_dead``   node (index), address, node_id: a node alive at the start that Ray declared
                    dead
``ray_actor_died``  class, node (index, or None), address, pid, cause: an actor seen alive that
                    Ray reports dead while the trainer runs (an earlier launch's actors, dying
                    with their job, are among them: Ray's cause says so)

A fault can wait on them (``at: {event: ray_node_dead}``); the checks see them in the timeline.

The watch runs in a process of its own (:class:`WatchProcess`, ``python -m rlsim.scenario.watch``)
that appends to a file the runner reads as it reads the trainer's events: Ray's GCS client ends
the process that holds it once the GCS has been gone for a while (a killed or restarted head), and
that must never be the harness.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from rlsim.backends.ray_state import reader
from rlsim.files import append_line
from rlsim.history import EventTail
from rlsim.host.home import auth_token_path


class RayWatch:
    """One look at the GCS per ``poll()``, which returns the new events. A GCS it cannot reach
    ends the watch with one ``ray_watch_error`` event, never the scenario. Runs in the watch
    process (:func:`main`), which polls every ``every_s`` seconds."""

    def __init__(self, gcs_address: str, addresses: list[str], every_s: float = 0.5) -> None:
        self.gcs_address, self.every_s = gcs_address, every_s
        self.index = {address: i for i, address in enumerate(addresses)}
        self._stack = contextlib.ExitStack()
        self._gs = None
        self._alive_nodes: dict[str, str] = {}  # node id -> address, once seen alive
        self._alive_actors: dict[str, dict] = {}
        self._stopped = False

    def poll(self) -> list[dict]:
        if self._stopped:
            return []
        try:
            if self._gs is None:
                self._gs = self._stack.enter_context(
                    reader(self.gcs_address, str(auth_token_path())))
            new = self._nodes() + self._actors()
        except Exception as e:  # noqa: BLE001 - watching must never decide the scenario
            self.close()
            new = [self._event("ray_watch_error", message=f"{type(e).__name__}: {e}"[:300])]
        return new

    @property
    def stopped(self) -> bool:
        return self._stopped

    def close(self) -> None:
        self._stopped = True
        self._stack.close()

    def _nodes(self) -> list[dict]:
        died = []
        for n in self._gs.node_table():
            node_id, address = n["NodeID"], n["NodeManagerAddress"]
            if n["Alive"]:
                self._alive_nodes[node_id] = address
            elif self._alive_nodes.pop(node_id, None) is not None:
                died.append(self._event("ray_node_dead", node=self.index.get(address),
                                        address=address, node_id=node_id))
        return died

    def _actors(self) -> list[dict]:
        table = self._gs.actor_table()
        died = []
        for actor_id, a in table.items():
            if a["State"] == "ALIVE":
                self._alive_actors[actor_id] = a
            elif a["State"] == "DEAD" and actor_id in self._alive_actors:
                seen = self._alive_actors.pop(actor_id)
                address = seen["Address"]["IPAddress"]
                died.append(self._event("ray_actor_died", **{"class": a["ActorClassName"]},
                                        node=self.index.get(address), address=address,
                                        pid=seen["Pid"], cause=_cause(a)))
        return died

    @staticmethod
    def _event(type: str, **fields) -> dict:
        return {"ts": round(time.time(), 4), "type": type, **fields}


def _cause(actor: dict) -> str:
    """Ray's words for why the actor died (the error message of its death cause)."""
    cause = actor.get("DeathCause")
    try:
        which = cause.WhichOneof("context")  # a protobuf ActorDeathCause
        text = getattr(getattr(cause, which), "error_message", "") if which else ""
    except (AttributeError, TypeError, ValueError):
        text = str(cause or "")
    return " ".join(str(text).split())[:200]


class WatchProcess:
    """The runner's side: starts the watch for a cluster, ``poll()`` returns the new events it
    recorded in ``path`` (also kept in :attr:`events`), ``close()`` ends it (safe twice)."""

    def __init__(self, gcs_address: str, addresses: list[str], path: Path) -> None:
        self.tail = EventTail(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.proc = subprocess.Popen([sys.executable, "-m", "rlsim.scenario.watch", gcs_address,
                                      str(path), *addresses], stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL)

    @property
    def events(self) -> list[dict]:
        return self.tail.events

    def poll(self) -> list[dict]:
        return self.tail.poll()

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def main(argv: list[str]) -> int:
    """``python -m rlsim.scenario.watch GCS_ADDRESS OUT.jsonl NODE_ADDRESS...``: append Ray's
    events to OUT.jsonl until the parent (the runner) is gone or the watch ends."""
    gcs_address, out, addresses = argv[0], Path(argv[1]), argv[2:]
    parent, watch = os.getppid(), RayWatch(gcs_address, addresses)
    try:
        while os.getppid() == parent and not watch.stopped:
            for e in watch.poll():
                append_line(out, json.dumps(e))
            time.sleep(watch.every_s)
    finally:
        watch.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
