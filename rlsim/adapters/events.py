"""Any trainer that writes rlsim's documented ``events.jsonl`` (:mod:`rlsim.events` is a writer
with no dependencies): the scenario's ``command`` is started as given, with ``RLSIM_RUN_DIR`` and
``RLSIM_ATTEMPT`` in its environment."""

from __future__ import annotations

from rlsim.adapters.base import Adapter
from rlsim.events import EVENT_TYPES


class EventsAdapter(Adapter):
    name = "events"
    observes = EVENT_TYPES
