"""Any trainer that writes rlsim's documented ``events.jsonl`` (:mod:`rlsim.events` is a writer
with no dependencies): the scenario's ``command`` is started as given, with ``RLSIM_RUN_DIR`` and
``RLSIM_ATTEMPT`` in its environment."""

from __future__ import annotations

from pathlib import Path

from rlsim.adapters.base import Adapter, Launch
from rlsim.events import EVENT_TYPES
from rlsim.scenario.timeline import EventTail


class EventsAdapter(Adapter):
    name = "events"
    observes = EVENT_TYPES

    def command(self, trainer, launch: Launch) -> list[str]:
        return [launch.fill(arg) for arg in trainer.command]

    def events(self, run_dir: Path) -> EventTail:
        return EventTail(run_dir / "events.jsonl")
