"""The reference trainer on real GPUs, in what can be checked without one: which process-group
backend ranks on given devices choose, and how a real CUDA out-of-memory error is named."""

from __future__ import annotations

import os
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


def test_a_fake_gpu_worker_on_a_host_with_real_gpus_is_kept_off_them(monkeypatch):
    from rlsim.contract import FAKE_GPUS_VAR
    from trainer import host

    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: True)  # a CUDA build of torch
    for name in (host.FAKE_IDS_VAR, "DS_ACCELERATOR"):  # set first: their absence is restored
        monkeypatch.setenv(name, "")
        monkeypatch.delenv(name)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")  # Ray's ordinal of the fake GPU
    monkeypatch.delenv(FAKE_GPUS_VAR, raising=False)
    host._hide_real_gpus()  # a node with real GPUs: untouched
    assert host._gpu_ids() == "3" and "DS_ACCELERATOR" not in os.environ
    monkeypatch.setenv(FAKE_GPUS_VAR, "1")
    host._hide_real_gpus()
    env = os.environ
    assert env["CUDA_VISIBLE_DEVICES"] == "" and env["DS_ACCELERATOR"] == "cpu"
    assert host._gpu_ids() == "3"  # what the lost-GPU watch and the placement event read
    monkeypatch.setattr(torch.backends.cuda, "is_built", lambda: False)
    monkeypatch.delenv(host.FAKE_IDS_VAR)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    host._hide_real_gpus()  # a CPU build of torch: nothing to hide
    assert env["CUDA_VISIBLE_DEVICES"] == "5"


def test_gloo_bound_to_an_address_forms_a_group_with_the_options_torch_passes():
    # torch 2.14 calls ProcessGroupGloo(..., timeout=, enable_reconfigure=): the binding that
    # puts gloo on the node's address took no such option, and every run of a fresh install
    # (pip pulls the newest torch) failed at its process group. In a process of its own: the
    # default group is once per process
    import subprocess
    import sys

    code = """
import datetime, torch, torch.distributed as dist
from trainer.host import _gloo_bound_to
store = dist.TCPStore("127.0.0.1", 0, 1, is_master=True, timeout=datetime.timedelta(seconds=30))
with _gloo_bound_to("127.0.0.1"):
    dist.init_process_group("gloo", store=store, rank=0, world_size=1,
                            timeout=datetime.timedelta(seconds=30))
t = torch.ones(3)
dist.all_reduce(t)
dist.destroy_process_group()
print(t.tolist())
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120, cwd=os.path.dirname(os.path.dirname(os.path.dirname(
                             os.path.abspath(__file__)))))
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[1.0, 1.0, 1.0]"
