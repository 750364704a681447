"""The fault library, the one registry of faults: one module per fault (its parameters, the
backend capabilities it needs, ``inject`` and ``undo``). The scenario schema, the runner, each
backend's support check and the checks' notion of a disruptive fault all read :data:`FAULTS`.

Adding a fault: a module with a :class:`Fault` subclass and its entry point in the group
``rlsim.faults`` (rlsim's own in its pyproject.toml; a package of yours in its own), a scenario
and a test; nothing else.
"""

from rlsim.faults.base import Fault, FaultContext
from rlsim.registry import Registry

# name -> Fault class, from the entry point group rlsim.faults (rlsim's own and any package's)
FAULTS: Registry = Registry(
    "rlsim.faults", "fault", lambda f: f.name,
    accepts=lambda f: isinstance(f, type) and issubclass(f, Fault),
    kind="subclass of rlsim.faults.Fault")

__all__ = ["FAULTS", "Fault", "FaultContext"]
