"""The device stand-in: on a simulated node whose GPUs are fake, torch in the node's Python
processes sees the GPUs Ray gave the process as CUDA devices whose memory is the host's, so a
framework with no CPU path (``torch.cuda`` queries, ``.cuda()``, NCCL groups) runs unmodified.
What it fakes and what it cannot: docs/concepts/device-standin.md.

A cluster asks for it with ``cuda_standin: true`` (``rlsim cluster --cuda-standin``). Each node
with fake GPUs then starts its processes with :func:`node_env`: :data:`VAR`, the node's view
(GPUs, their size and type, its address, its ledger folder) and :data:`BOOT` first on
PYTHONPATH, whose ``sitecustomize`` calls :func:`activate` as Python starts; a worker forked from
a zygote calls it as it takes the worker's environment. :func:`activate` puts the stand-in in
force when torch is imported (at once if it already is). Only the variables, rlsim's package
and torch are needed in the process: no framework file is touched.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import os
import sys
import threading
from pathlib import Path

from rlsim.contract import STANDIN_VAR as VAR

BOOT = Path(__file__).parent / "boot"
LEDGER_DIR = "gpu-ledger"  # in a cluster's run directory: rlsim.standin.ledger's folder
NODE_VARS = (VAR, "RLSIM_NODE_GPUS", "RLSIM_GPU_MEMORY_GB", "RLSIM_ACCELERATOR",
             "RLSIM_NODE_ADDRESS", "RLSIM_GPU_LEDGER")


def node_env(gpus: int, memory_gb: float, accelerator: str | None, address: str,
             ledger: Path, pythonpath: str | None) -> dict[str, str]:
    """The variables a stand-in node's processes start with (``pythonpath``: the one they
    would have had)."""
    path = os.pathsep.join([str(BOOT), *([pythonpath] if pythonpath else [])])
    return {VAR: "1", "RLSIM_NODE_GPUS": str(gpus), "RLSIM_GPU_MEMORY_GB": f"{memory_gb:g}",
            "RLSIM_ACCELERATOR": accelerator or "", "RLSIM_NODE_ADDRESS": address,
            "RLSIM_GPU_LEDGER": str(ledger), "PYTHONPATH": path}


def deepspeed_env(env) -> dict[str, str]:
    """DeepSpeed's accelerator on a stand-in node: the CPU's, unless ``env`` names one.
    DeepSpeed picks its accelerator by what torch says, and CUDA's would build CUDA kernels."""
    return {} if env.get("DS_ACCELERATOR") else {"DS_ACCELERATOR": "cpu"}


def without(env: dict[str, str]) -> dict[str, str]:
    """``env`` less the stand-in's variables and its PYTHONPATH entry."""
    out = {k: v for k, v in env.items() if k not in NODE_VARS}
    if "PYTHONPATH" in out:
        kept = [p for p in out["PYTHONPATH"].split(os.pathsep) if p != str(BOOT)]
        if kept:
            out["PYTHONPATH"] = os.pathsep.join(kept)
        else:
            del out["PYTHONPATH"]
    return out


def real_gpu_problem() -> str | None:
    """Why the stand-in must not start on this machine: a real NVIDIA GPU is visible (its
    device files), where CUDA is the real thing and the stand-in would hide it."""
    found = sorted(str(p) for p in Path("/dev").glob("nvidia[0-9]*"))
    if found:
        return (f"a real GPU is visible here ({', '.join(found[:3])}): the device stand-in "
                "only stands in for fake GPUs; fix: drop cuda_standin, or give the nodes the "
                "real devices with cuda_devices")
    return None


def install() -> bool:
    """Put the stand-in in force in this process now (torch imported); False, with a line on
    stderr, where torch sees a real CUDA device."""
    import torch

    if torch.backends.cuda.is_built() and torch._C._cuda_getDeviceCount() > 0:
        print("rlsim device stand-in: not installed: torch sees a real CUDA device here",
              file=sys.stderr)
        return False
    from rlsim.standin import cuda

    cuda.install(cuda.View.from_env())
    return True


def _vllm_communicator(module) -> None:
    """vLLM's NCCL communicator answered by gloo (:class:`rlsim.standin.gloo.GlooCommunicator`),
    bound to the node's address."""
    from rlsim.standin import cuda, gloo

    if not getattr(cuda.S, "installed", False):  # a real GPU here: vLLM's own stays
        return

    def communicator(group, device, library_path=None):
        return gloo.GlooCommunicator(group, device, library_path,
                                     ip=lambda: cuda.S.view.address)

    module.PyNcclCommunicator = communicator


def _vllm_weights_in_place(module) -> None:
    """vLLM's CPU build keeps each linear layer's weight where a framework's weight push finds
    it. It packs the weight for its own kernels once loaded and drops the parameter
    (``dispatch_cpu_unquantized_gemm(layer, remove_weight=True)``), so ``model.load_weights``
    of a pushed tensor, which frameworks call on a running engine (OpenRLHF's
    ``WorkerWrap.update_weight``), raises ``'Parameter' object has no attribute
    'weight_loader'``; with ``remove_weight=False`` the packed copy would go on serving the old
    weights. On a GPU the parameter stays and is used in place: here every 2-D linear weight
    stays and is multiplied by torch's ``linear`` (the CPU build's own fallback), slower than
    the packed kernels, the same numbers as the weights pushed."""
    from rlsim.standin import cuda

    if not getattr(cuda.S, "installed", False):
        return
    packed = module.dispatch_cpu_unquantized_gemm

    def in_place(layer, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:
            return packed(layer, remove_weight)
        import torch.nn.functional as F

        layer.cpu_linear = lambda x, weight, bias: F.linear(x, weight, bias)

    module.dispatch_cpu_unquantized_gemm = in_place


# what is put in force as each module finishes importing (torch first: the others need it)
AFTER = {"torch": lambda module: install(),
         "vllm.distributed.device_communicators.pynccl": _vllm_communicator,
         "vllm.model_executor.layers.utils": _vllm_weights_in_place}


def _run_hook(name: str, module) -> None:
    """:data:`AFTER`'s hook of ``name``; one that fails is said on stderr, never in the way of
    the import (a vLLM without what a hook changes imports as it is)."""
    try:
        AFTER[name](module)
    except Exception as e:  # noqa: BLE001 - the framework's import must go on
        print(f"rlsim device stand-in: not applied to {name}: {type(e).__name__}: {e}",
              file=sys.stderr)


class _AfterImport(importlib.abc.MetaPathFinder):
    """Runs :data:`AFTER`'s hook of a module as soon as that module has finished importing."""

    def __init__(self) -> None:
        self._finding = threading.local()  # the name this thread is looking up without us

    def find_spec(self, name, path=None, target=None):
        if name not in AFTER or getattr(self._finding, "name", None) == name:
            return None
        self._finding.name = name  # the module's own spec, this finder passing
        try:
            spec = importlib.util.find_spec(name)
        finally:
            self._finding.name = None
        if spec is None or spec.loader is None:
            return spec
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            _run_hook(name, module)

        spec.loader.exec_module = exec_module
        return spec


def activate(env=os.environ) -> None:
    """Where ``env`` asks for the stand-in: in force now for what is imported already (torch,
    vLLM's NCCL communicator), and for the rest as it is imported. The boot folder goes last on
    ``sys.path`` where it is not there (a worker forked from a zygote started without it), for
    the modules it answers for (``flash_attn_2_cuda``)."""
    if env.get(VAR) != "1":
        return
    if str(BOOT) not in sys.path:
        sys.path.append(str(BOOT))
    for name in AFTER:
        if name in sys.modules and (name != "torch" or hasattr(sys.modules[name], "cuda")):
            _run_hook(name, sys.modules[name])
    if not any(isinstance(f, _AfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _AfterImport())
