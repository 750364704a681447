"""A verl device platform for rlsim's fake GPUs: verl's own trainer, unpatched, on CPU processes
that hold Ray ``GPU`` resources rlsim's simulated nodes advertise.

verl picks its device platform through a registry (``verl/plugin/platform/platform_manager.py``):
built-ins for nvidia, huawei and amd, and any class a plugin registers, chosen by
``VERL_PLATFORM`` (else auto-detected, else nvidia). This module is such a plugin, loaded by verl
itself through the ``verl.plugins`` entry point rlsim's package declares (``verl/__init__.py``
loads that group on import); selecting it takes ``VERL_PLATFORM=rlsim_cpu``, which rlsim's verl
scenarios set. Elsewhere it is inert: ``is_platform_available`` says no unless selected, so
auto-detection on a GPU host never lands here.

What each answer gives verl (0.9.1):

- ``device_name`` ``cpu``: ``verl.utils.device.get_device_name()``; tensors and FSDP modules
  live on the CPU.
- ``device_module``: the object verl calls as ``get_torch_device().<fn>`` (empty_cache,
  synchronize, mem_get_info, memory_allocated, streams, rng state...): :class:`FakeDevice`,
  answering for a device that has no memory of its own to report.
- ``communication_backend_name`` ``gloo``: ``get_nccl_backend()``, the backend of every
  ``torch.distributed`` process group verl creates (FSDP's all-gathers and reduce-scatters).
- ``ray_resource_name`` ``GPU`` and ``ray_resource_options``: verl's placement groups and worker
  actors ask Ray for ``GPU``, which the simulated nodes advertise (verl's resource check counts
  Ray's ``GPU``, verl#3266).
- ``visible_devices_envvar`` ``CUDA_VISIBLE_DEVICES`` and ``ray_noset_envvars``
  (``RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES``, which the scenarios give every worker): verl
  then reads the fake GPU's index from Ray and sets the worker's device, which is where
  :func:`join_process_group` runs (it says why).
- ``current_device`` ``torch.device("cpu")``: verl passes it wherever torch takes a device.
- ``is_ipc_supported`` False: no CUDA IPC handles; verl moves weights to its vLLM servers
  through shared memory instead.

Selected, it also registers verl's rollout ``vllm`` with the replica of
:mod:`rlsim.adapters.verl_rollout`, which loads pushed weights the way vLLM's CPU build can.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any

import torch

from rlsim.ray_internals.settings import NOSET_CUDA_VAR

try:
    from verl.plugin.platform.platform_base import PlatformBase
    from verl.plugin.platform.platform_manager import PlatformRegistry
except ImportError:  # verl absent (or too old to have platform plugins): nothing to register
    PlatformBase = PlatformRegistry = None

NAME = "rlsim_cpu"
GIB = 1024**3


def join_process_group() -> None:
    """Create this worker's default ``torch.distributed`` group on gloo, once, when verl sets the
    worker's device.

    verl 0.9.1 creates it in ``initialize_global_process_group_ray``
    (``verl/utils/distributed.py:89``) with the backend string ``cpu:gloo,<device>:<backend>``,
    which torch rejects for a platform whose device is the CPU ("Duplicate device type cpu in
    backend string"), and skips creating it when one already exists (line 90). verl sets the
    device before that, in ``Worker._setup_env_cuda_visible_devices``
    (``verl/single_controller/base/worker.py:281``) when Ray leaves ``CUDA_VISIBLE_DEVICES``
    unset (``ray_noset_envvars`` below), with ``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and
    ``MASTER_PORT`` already in the worker's environment (``single_controller/ray/base.py:632``).
    Processes that are not ranks of a worker group (vLLM servers) have no ``RANK``: nothing to join.
    """
    import torch.distributed as dist

    if dist.is_initialized() or "RANK" not in os.environ or "MASTER_ADDR" not in os.environ:
        return
    dist.init_process_group(
        backend="gloo",
        rank=int(os.environ["RANK"]),
        world_size=int(os.environ["WORLD_SIZE"]),
    )


class FakeDevice:
    """``torch.cuda``'s calls that verl makes, answered for a CPU process standing for one GPU:
    memory figures from the fake GPU's declared size (``RLSIM_GPU_MEMORY_GB``, default 80) and
    nothing used; streams and events that order nothing (CPU work is synchronous)."""

    class Stream:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def wait_stream(self, other) -> None:
            pass

    class Event:
        def __init__(self, *args, **kwargs) -> None:
            pass

        def record(self, stream=None) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def wait(self, stream=None) -> None:
            pass

    @staticmethod
    def _total() -> int:
        return int(float(os.environ.get("RLSIM_GPU_MEMORY_GB", "80")) * GIB)

    def is_available(self) -> bool:
        return True

    def device_count(self) -> int:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        return max(1, len([d for d in visible.split(",") if d.strip()]))

    def current_device(self) -> int:
        return 0

    def set_device(self, index) -> None:
        join_process_group()

    def synchronize(self, device=None) -> None:
        pass

    def empty_cache(self) -> None:
        pass

    def ipc_collect(self) -> None:
        pass

    def mem_get_info(self, device=None) -> tuple[int, int]:
        return self._total(), self._total()

    def memory_allocated(self, device=None) -> int:
        return 0

    def memory_reserved(self, device=None) -> int:
        return 0

    def max_memory_allocated(self, device=None) -> int:
        return 0

    def max_memory_reserved(self, device=None) -> int:
        return 0

    def reset_peak_memory_stats(self, device=None) -> None:
        pass

    def set_per_process_memory_fraction(self, fraction, device=None) -> None:
        pass

    def get_device_name(self, device=None) -> str:
        return "rlsim fake GPU (CPU)"

    def current_stream(self, device=None) -> FakeDevice.Stream:
        return FakeDevice.Stream()

    def stream(self, stream=None):
        return contextlib.nullcontext()

    def get_rng_state(self, device=None) -> torch.Tensor:
        return torch.get_rng_state()

    def set_rng_state(self, state, device=None) -> None:
        torch.set_rng_state(state)

    def manual_seed(self, seed: int) -> None:
        torch.manual_seed(seed)

    def manual_seed_all(self, seed: int) -> None:
        torch.manual_seed(seed)


if PlatformBase is not None:

    @PlatformRegistry.register(platform=NAME)
    class PlatformRlsimCPU(PlatformBase):
        """verl on rlsim's fake GPUs: CPU tensors, gloo, Ray ``GPU`` resources, no IPC."""

        device = FakeDevice()

        @property
        def device_name(self) -> str:
            return "cpu"

        @property
        def vendor_name(self) -> str:
            return "rlsim"

        @property
        def device_module(self) -> Any:
            return self.device

        def is_available(self) -> bool:
            return True

        def is_platform_available(self, use_smi_check=False) -> bool:
            return selected()

        def current_device(self) -> torch.device:
            # verl hands this to torch wherever a device goes (``model.to(device=get_device_id())``,
            # ``verl/utils/fsdp_utils.py:507``); an int there means the CUDA device of that index
            return torch.device("cpu")

        def device_count(self) -> int:
            return self.device.device_count()

        def set_device(self, device_index: int) -> None:
            join_process_group()

        def synchronize(self, device_index=None) -> None:
            pass

        def manual_seed(self, seed: int) -> None:
            torch.manual_seed(seed)

        def manual_seed_all(self, seed: int) -> None:
            torch.manual_seed(seed)

        def set_allocator_settings(self, settings: str) -> None:
            pass

        def empty_cache(self) -> None:
            pass

        def get_device_capability(self, device_index: int = 0):
            return None, None

        def communication_backend_name(self) -> str:
            return "gloo"

        def visible_devices_envvar(self) -> str:
            return "CUDA_VISIBLE_DEVICES"

        @contextlib.contextmanager
        def nvtx_range(self, msg: str):
            yield

        def profiler_start(self) -> None:
            pass

        def profiler_stop(self) -> None:
            pass

        def ray_resource_name(self) -> str:
            return "GPU"

        def ray_noset_envvars(self) -> list[str]:
            return [NOSET_CUDA_VAR]

        def is_ipc_supported(self) -> bool:
            return False

        def cudart(self) -> Any:
            return None


def _cpu_vllm_replica():
    from rlsim.adapters.verl_rollout import CPUvLLMReplica

    return CPUvLLMReplica


def selected() -> bool:
    return os.environ.get("VERL_PLATFORM", "").strip().lower() == NAME


if PlatformBase is not None and selected():
    # verl's rollout "vllm", its loader answering with the replica that loads weights the way
    # vLLM's CPU build can (rlsim.adapters.verl_rollout says why)
    from verl.workers.rollout.replica import RolloutReplicaRegistry

    RolloutReplicaRegistry.register("vllm", _cpu_vllm_replica)
