"""The device stand-in's GPU memory ledger, pure: what a process holds on each fake GPU, what
the node's other processes on that GPU publish, what a fault holds there, and the out-of-memory
error a real GPU would raise when an allocation does not fit.

One process keeps one :class:`Ledger`. It counts the bytes of every tensor the stand-in placed
on a fake GPU by name (a factory given ``device="cuda"``, ``.cuda()``, ``.to("cuda")``) until
that tensor's storage is freed; results of operations on such tensors are made by the CPU's
kernels and are not counted (activations are invisible to it, as the docs' fidelity table says).

Processes sharing a fake GPU (roles colocated on one GPU) see each other through small files in
the node's ledger folder, ``n<node>-g<gpu>.<pid>`` holding the bytes a process holds there,
written when its holding has moved by :data:`PUBLISH_STEP` since the last write. What a
``gpu_oom`` fault holds is ``reserve.json`` in that folder: ``{"<node address>" or "*": GiB}``.
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from rlsim.host.pids import pid_alive

GIB = 1024**3
MIB = 1024**2
PUBLISH_STEP = 8 * MIB  # a peer's figure is at most this stale
PEERS_TTL_S = 0.5  # how long a read of the peers' files is reused
RESERVE_NAME = "reserve.json"


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.2f} GiB"


class Ledger:
    """Bytes held per device index of this process (see the module doc).

    ``gpu_ids[d]``: the node's GPU id behind device index ``d`` (as Ray hands them out);
    ``capacity``: bytes per fake GPU; ``folder``: the node's ledger folder (None: no peers, no
    reserve); ``node``: the node's index, ``address`` its address (the reserve's key)."""

    def __init__(self, gpu_ids: list[str], capacity: int, folder: Path | None, node: str,
                 address: str, clock: Callable[[], float] = time.monotonic) -> None:
        self.gpu_ids, self.capacity, self.folder = gpu_ids, capacity, folder
        self.node, self.address, self.clock = node, address, clock
        self.held = dict.fromkeys(range(len(gpu_ids)), 0)
        self.peak = dict(self.held)
        self._published = dict(self.held)
        self._peers: dict[int, tuple[float, int]] = {}

    # ---- what torch.cuda's memory queries answer ----------------------------------------------

    def reserved_by_fault(self) -> int:
        """Bytes a fault holds on each GPU of this node now (0 without a reserve file)."""
        if self.folder is None:
            return 0
        try:
            table = json.loads((self.folder / RESERVE_NAME).read_text())
        except (OSError, ValueError):
            return 0
        try:
            return int(float(table.get(self.address, table.get("*", 0.0))) * GIB)
        except (TypeError, ValueError, AttributeError):
            return 0

    def peers(self, device: int) -> int:
        """Bytes the node's other live processes publish on this device's GPU."""
        if self.folder is None:
            return 0
        now = self.clock()
        seen = self._peers.get(device)
        if seen is not None and now - seen[0] < PEERS_TTL_S:
            return seen[1]
        total = 0
        for path in self.folder.glob(f"{self._stem(device)}.*"):
            pid = path.suffix[1:]
            if not pid.isdigit() or int(pid) == os.getpid() or not pid_alive(int(pid)):
                continue
            try:
                total += int(path.read_text() or 0)
            except (OSError, ValueError):
                continue
        self._peers[device] = (now, total)
        return total

    def free(self, device: int) -> int:
        """What ``torch.cuda.mem_get_info`` calls free on ``device``."""
        used = self.held[device] + self.peers(device) + self.reserved_by_fault()
        return max(0, self.capacity - used)

    # ---- allocations ---------------------------------------------------------------------------

    def charge(self, device: int, nbytes: int) -> None:
        """Count ``nbytes`` on ``device``, or raise :class:`OutOfMemory` as CUDA's caching
        allocator would, with its figures."""
        free = self.free(device)
        if nbytes > free:
            raise OutOfMemory(self.oom_message(device, nbytes, free))
        self.held[device] += nbytes
        self.peak[device] = max(self.peak[device], self.held[device])
        self._publish(device)

    def release(self, device: int, nbytes: int) -> None:
        self.held[device] = max(0, self.held[device] - nbytes)
        self._publish(device)

    def reset_peak(self, device: int) -> None:
        self.peak[device] = self.held[device]

    def oom_message(self, device: int, nbytes: int, free: int) -> str:
        """CUDA's own wording (torch's caching allocator), then what rlsim knows of why."""
        fault = self.reserved_by_fault()
        why = [f"this process holds {gib(self.held[device])}"]
        if peers := self.peers(device):
            why.append(f"other processes on this GPU {gib(peers)}")
        if fault:
            why.append(f"a gpu_oom fault holds {gib(fault)}")
        return (f"CUDA out of memory. Tried to allocate {gib(nbytes)}. GPU {device} has a total "
                f"capacity of {gib(self.capacity)} of which {gib(free)} is free. Of the "
                f"allocated memory {gib(self.held[device])} is allocated by PyTorch. [rlsim "
                f"device stand-in: fake GPU {self.gpu_ids[device]} of node {self.node} "
                f"({self.address}); {', '.join(why)}]")

    def _stem(self, device: int) -> str:
        return f"n{self.node}-g{self.gpu_ids[device]}"

    def _publish(self, device: int) -> None:
        if self.folder is None or abs(self.held[device] - self._published[device]) < \
                PUBLISH_STEP and (self.held[device] or not self._published[device]):
            return
        path = self.folder / f"{self._stem(device)}.{os.getpid()}"
        try:
            if self.held[device]:  # whole or not at all: a peer never reads half a number
                part = path.with_name(path.name + ".part")
                part.write_text(str(self.held[device]))
                os.replace(part, path)
            else:
                path.unlink(missing_ok=True)
        except OSError:
            return  # the folder went with its cluster: peers simply stop seeing this process
        self._published[device] = self.held[device]


class OutOfMemory(Exception):
    """The ledger's refusal; the stand-in raises it as ``torch.OutOfMemoryError``."""
