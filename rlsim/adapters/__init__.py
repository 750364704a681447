"""The one registry of adapters: how a scenario drives a trainer (see :mod:`rlsim.adapters.base`).

Adding one: a module with an :class:`~rlsim.adapters.base.Adapter` subclass, its line here.
"""

from rlsim.adapters.base import PLACEHOLDERS, Adapter, TrainerLaunch
from rlsim.adapters.events import EventsAdapter
from rlsim.adapters.nemo_rl import NemoRLAdapter
from rlsim.adapters.openrlhf import OpenRLHFAdapter
from rlsim.adapters.ray_train import RayTrainAdapter
from rlsim.adapters.rlsim import RlsimAdapter
from rlsim.adapters.verl import VerlAdapter

ADAPTERS: dict[str, Adapter] = {a.name: a for a in (
    RlsimAdapter(), EventsAdapter(), RayTrainAdapter(), VerlAdapter(), OpenRLHFAdapter(),
    NemoRLAdapter())}

__all__ = ["ADAPTERS", "PLACEHOLDERS", "Adapter", "TrainerLaunch"]
