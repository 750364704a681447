"""The fault library, the one registry of faults: one module per fault (its parameters, the
backend capabilities it needs, ``inject`` and ``undo``). The scenario schema, the runner, each
backend's support check and the checks' notion of a disruptive fault all read :data:`FAULTS`.

Adding a fault: a module here with a :class:`Fault` subclass, its line below, a scenario and a
test; nothing else.
"""

from rlsim.faults.base import Fault, FaultContext
from rlsim.faults.block_port import BlockPort
from rlsim.faults.corrupt_checkpoint import CorruptCheckpoint
from rlsim.faults.disk_full import DiskFull
from rlsim.faults.gpu_oom import GpuOom
from rlsim.faults.host_oom import HostOom
from rlsim.faults.kill_head import KillHead
from rlsim.faults.kill_node import KillNode
from rlsim.faults.kill_role import KillRole
from rlsim.faults.partition import Partition
from rlsim.faults.pause_node import PauseNode
from rlsim.faults.restart_node import RestartNode

FAULTS: dict[str, type[Fault]] = {f.name: f for f in (
    KillNode, RestartNode, PauseNode, Partition, BlockPort, KillRole, CorruptCheckpoint, GpuOom,
    HostOom, KillHead, DiskFull)}

__all__ = ["FAULTS", "Fault", "FaultContext"]
