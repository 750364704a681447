"""The one registry of adapters: how a scenario drives a trainer (see :mod:`rlsim.adapters.base`).

Adding one: a module with an :class:`~rlsim.adapters.base.Adapter` subclass and its entry point in
the group ``rlsim.adapters``.
"""

from rlsim.adapters.base import PLACEHOLDERS, Adapter, TrainerLaunch
from rlsim.registry import Registry

# name -> adapter, from the entry point group rlsim.adapters (each names its Adapter class)
ADAPTERS: Registry = Registry(
    "rlsim.adapters", "adapter", lambda a: a.name, make=lambda c: c(),
    accepts=lambda a: isinstance(a, type) and issubclass(a, Adapter),
    kind="subclass of rlsim.adapters.Adapter")

__all__ = ["ADAPTERS", "PLACEHOLDERS", "Adapter", "TrainerLaunch"]
