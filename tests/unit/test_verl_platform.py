"""rlsim's verl platform (rlsim/adapters/verl_platform.py): the device verl is given, the process
group it joins, and what verl itself sees once its plugin loader has read rlsim's entry point
(those last ones need verl: `bash ci/setup.sh --verl`)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys

import pytest
import torch

from rlsim.adapters.verl_platform import FakeDevice

HAS_VERL = importlib.util.find_spec("verl") is not None
needs_verl = pytest.mark.skipif(not HAS_VERL,
                                reason="verl is not installed (bash ci/setup.sh --verl)")


def test_the_fake_device_reports_its_declared_memory_free(monkeypatch):
    monkeypatch.setenv("RLSIM_GPU_MEMORY_GB", "24")
    free, total = FakeDevice().mem_get_info()
    assert free == total == 24 * 1024**3
    assert FakeDevice().memory_allocated() == 0


def test_the_fake_device_counts_the_gpus_ray_gave_the_worker(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    assert FakeDevice().device_count() == 2
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert FakeDevice().device_count() == 1


def test_the_fake_devices_rng_state_is_the_cpus():
    device = FakeDevice()
    state = device.get_rng_state()
    first = torch.rand(3)
    device.set_rng_state(state)
    assert torch.equal(torch.rand(3), first)


def test_streams_and_events_order_nothing_and_say_so_without_error():
    device = FakeDevice()
    stream = device.current_stream()
    assert isinstance(stream, FakeDevice.Stream)
    # ordering calls are accepted and do nothing: no handle, no wait, nothing to report
    assert stream.wait_stream(device.Stream()) is None
    assert stream.synchronize() is None
    event = device.Event()
    assert event.record(stream) is None
    assert event.wait(stream) is None
    assert event.synchronize() is None
    # work under a stream runs at once, in place (CPU work is synchronous): its result is there
    # as the block ends, and an error raised in it is not swallowed
    done = []
    with device.stream(stream):
        done.append(torch.ones(3).sum().item())
    assert done == [3.0]
    with pytest.raises(RuntimeError, match="inside the stream"), device.stream(stream):
        raise RuntimeError("inside the stream")


def run_python(code: str, env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", code], env={**os.environ, **env},
                         capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_a_process_that_is_no_rank_joins_no_group():
    got = run_python(
        "import json, os, torch.distributed as d\n"
        "from rlsim.adapters.verl_platform import join_process_group\n"
        "os.environ.pop('RANK', None)\n"
        "join_process_group()\n"
        "print(json.dumps({'joined': d.is_initialized()}))", {})
    assert got == {"joined": False}


def test_a_rank_joins_the_default_group_on_gloo_once():
    got = run_python(
        "import json, torch.distributed as d\n"
        "from rlsim.adapters.verl_platform import join_process_group\n"
        "join_process_group(); join_process_group()\n"
        "print(json.dumps({'backend': d.get_backend(), 'world': d.get_world_size(),"
        " 'rank': d.get_rank()}))",
        {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29531"})
    assert got == {"backend": "gloo", "world": 1, "rank": 0}


VERL_SEES = (
    "import json, verl\n"
    "from verl.plugin.platform import get_platform\n"
    "from verl.utils.device import get_device_name, get_nccl_backend, get_resource_name\n"
    "from verl.workers.rollout.replica import get_rollout_replica_class\n"
    "p = get_platform()\n"
    "print(json.dumps({'platform': type(p).__name__, 'device': get_device_name(),"
    " 'backend': get_nccl_backend(), 'resource': get_resource_name(),"
    " 'ipc': p.is_ipc_supported(), 'replica': get_rollout_replica_class('vllm').__name__,"
    " 'current': str(p.current_device()) if type(p).__name__ == 'PlatformRlsimCPU' else None}))")


@needs_verl
def test_verl_selects_rlsims_platform_through_its_own_plugin_loader():
    got = run_python(VERL_SEES, {"VERL_PLATFORM": "rlsim_cpu"})
    assert got == {"platform": "PlatformRlsimCPU", "device": "cpu", "backend": "gloo",
                   "resource": "GPU", "ipc": False, "replica": "CPUvLLMReplica",
                   "current": "cpu"}


@needs_verl
def test_without_verl_platform_set_the_plugin_changes_nothing_of_verl():
    got = run_python(VERL_SEES, {"VERL_PLATFORM": ""})
    assert got["platform"] != "PlatformRlsimCPU"
    assert got["replica"] == "vLLMReplica"
