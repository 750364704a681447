"""The reference trainer on real GPUs, in what can be checked without one: which process-group
backend ranks on given devices choose, and how a real CUDA out-of-memory error is named."""

from __future__ import annotations

import re

import pytest
import torch

from trainer.config import load_config
from trainer.errors import TrainerError
from trainer.host import Host, choose_backend
from trainer.placement import plan_placement

GPU_A, GPU_B = "GPU-1b2c", "GPU-9f8e"


@pytest.mark.parametrize(("devices", "backend", "why"), [
    (["cpu", "cpu"], "gloo", "no rank has a GPU"),
    ([GPU_A, GPU_B], "nccl", "every rank on a GPU of its own"),
    ([GPU_A], "nccl", "every rank on a GPU of its own"),
    ([GPU_A, GPU_B, GPU_A], "gloo", "ranks 0 and 2 share GPU GPU-1b2c"),
    ([GPU_A, "cpu"], "gloo", "ranks [1] have no GPU"),
])
def test_ranks_choose_nccl_only_with_a_gpu_each(devices, backend, why):
    chose, reason = choose_backend(devices)
    assert chose == backend and why in reason


def test_a_real_cuda_oom_is_named_with_role_node_gpu_and_the_fix():
    cfg = load_config("grpo_tiny", [])
    host = Host.__new__(Host)  # the naming alone: no process group, no models
    host.cfg, host.plan, host.ip = cfg, plan_placement(cfg), "127.77.1.11"
    host.slot = host.plan.workers[1]
    host.micro, host.device = {"actor": 64}, torch.device("cpu")
    with pytest.raises(TrainerError) as e, host._named_oom("actor", "training"):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has "
                                     "a total capacity of 79.19 GiB of which 1.06 MiB is free.")
    assert isinstance(e.value, torch.OutOfMemoryError) and e.value.kind == "oom"
    # what scenarios/gpu_oom_colocated.yaml expects of the run's failure
    assert re.search(r"CUDA out of memory.*role=.* node=1 gpu=0.*Fix:", str(e.value)), e.value
    assert "actor.micro_batch_size (now 64)" in str(e.value)
