"""The device stand-in (rlsim.standin): its ledger's arithmetic, and torch in a fresh Python
started as a stand-in node starts its processes (the variables, the boot folder on PYTHONPATH),
with no cluster: what torch.cuda answers, where tensors land, copies on moves, memory counted
and torch's own OutOfMemoryError, threads, NCCL made gloo."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlsim import standin
from rlsim.host.spec import ClusterSpec
from rlsim.standin.gloo import as_gloo
from rlsim.standin.ledger import GIB, MIB, Ledger, OutOfMemory


def _ledger(tmp_path: Path, gb: float = 1.0, node: str = "1") -> Ledger:
    return Ledger(["3", "5"], int(gb * GIB), tmp_path, node, "127.77.0.11")


def test_the_ledger_counts_peaks_and_refuses_what_does_not_fit(tmp_path):
    led = _ledger(tmp_path)
    led.charge(1, 600 * MIB)
    led.release(1, 200 * MIB)
    assert (led.held[1], led.peak[1], led.held[0]) == (400 * MIB, 600 * MIB, 0)
    with pytest.raises(OutOfMemory) as e:
        led.charge(1, 700 * MIB)
    assert str(e.value).startswith("CUDA out of memory. Tried to allocate 0.68 GiB. GPU 1 has a "
                                   "total capacity of 1.00 GiB of which 0.61 GiB is free.")
    assert "fake GPU 5 of node 1 (127.77.0.11)" in str(e.value)
    assert led.held[1] == 400 * MIB  # a refusal takes nothing
    led.reset_peak(1)
    assert led.peak[1] == 400 * MIB


def test_a_fault_and_the_nodes_other_processes_take_their_share(tmp_path):
    led = _ledger(tmp_path)
    (tmp_path / "reserve.json").write_text(json.dumps({"127.77.0.11": 0.25, "*": 0.5}))
    peer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        (tmp_path / f"n1-g5.{peer.pid}").write_text(str(128 * MIB))
        (tmp_path / "n1-g5.999999999").write_text(str(512 * MIB))  # no such process: not counted
        (tmp_path / f"n1-g3.{peer.pid}").write_text(str(512 * MIB))  # another GPU
        assert led.free(1) == GIB - 256 * MIB - 128 * MIB
        with pytest.raises(OutOfMemory, match="other processes on this GPU 0.12 GiB, a gpu_oom "
                                              "fault holds 0.25 GiB"):
            led.charge(1, 700 * MIB)
    finally:
        peer.kill()
        peer.wait()


def test_a_process_publishes_what_it_holds_for_its_peers(tmp_path):
    led = _ledger(tmp_path)
    led.charge(0, 4 * MIB)
    assert not list(tmp_path.iterdir())  # under the step: not worth a write
    led.charge(0, 8 * MIB)
    assert (tmp_path / f"n1-g3.{os.getpid()}").read_text() == str(12 * MIB)
    led.release(0, 12 * MIB)
    assert not list(tmp_path.iterdir())  # nothing held: no file


def test_nccl_is_asked_for_in_many_spellings():
    assert [as_gloo(b) for b in ("nccl", "NCCL", "cpu:gloo,cuda:nccl", None, "cuda:nccl")] == \
        ["gloo"] * 5
    assert as_gloo("gloo") is None and as_gloo("mpi") is None


def test_node_env_and_back(tmp_path):
    env = standin.node_env(2, 40.0, "A100", "127.77.0.12", tmp_path, "/x")
    assert env["PYTHONPATH"] == f"{standin.BOOT}{os.pathsep}/x" and env[standin.VAR] == "1"
    back = standin.without({**env, "HOME": "/root"})
    assert back == {"HOME": "/root", "PYTHONPATH": "/x"}


def test_the_cluster_asks_for_it_only_with_fake_gpus():
    with pytest.raises(ValidationError, match="cuda_standin needs fake GPUs"):
        ClusterSpec(name="c", nodes=2, gpus_per_node=0, cuda_standin=True)
    with pytest.raises(ValidationError, match="cuda_standin with cuda_devices"):
        ClusterSpec(name="c", nodes=2, gpus_per_node=1, node={1: {"cuda_devices": "0"}},
                    cuda_standin=True)
    ClusterSpec(name="c", nodes=2, gpus_per_node=0, node={1: {"gpus": 2}}, cuda_standin=True)


PROGRAM = textwrap.dedent("""\
    import json, threading, torch, torch.distributed as dist, os
    out = {}
    out["available"] = torch.cuda.is_available()
    out["count"] = torch.cuda.device_count()
    out["name"] = torch.cuda.get_device_name(1)
    out["total"] = torch.cuda.get_device_properties(0).total_memory
    made = [torch.zeros(3, device="cuda"), torch.tensor([1.0], device="cuda:1"),
            torch.ones(2).cuda(), torch.ones(2).to(0), torch.empty(2, device=0),
            torch.nn.Linear(3, 3).cuda().weight, torch.as_tensor([1.0], device="cuda")]
    out["devices"] = sorted({str(t.device) for t in made})
    a = torch.ones(4); b = a.cuda(); b.add_(1); c = b.cpu(); c.add_(1)
    out["moves_copy"] = [a[0].item(), b[0].item(), c[0].item()]
    out["same"] = b.cuda() is b
    torch.cuda.set_device(1)
    before = torch.cuda.memory_allocated(1)
    big = torch.empty(256, 1024, 1024, device="cuda")  # 1 GiB on device 1
    out["counted"] = torch.cuda.memory_allocated(1) - before
    out["before"] = before
    out["free"] = torch.cuda.mem_get_info(1)[0]
    del big
    out["freed"] = torch.cuda.memory_allocated(1) - before
    try:
        torch.empty(3 * 256, 1024, 1024, device="cuda:1")
    except torch.OutOfMemoryError as e:
        out["oom"] = str(e)
    seen = []
    t = threading.Thread(target=lambda: seen.append(str(torch.ones(1, device=0).device)))
    t.start(); t.join()
    out["thread"] = seen
    m = torch.nn.Linear(3, 3).cuda(); opt = torch.optim.AdamW(m.parameters())
    m(torch.randn(2, 3, device="cuda")).sum().backward(); opt.step()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda", 0))
    x = torch.ones(2, device="cuda"); dist.all_reduce(x); dist.barrier(device_ids=[0])
    out["backend"] = dist.get_backend()
    dist.destroy_process_group()
    torch.cuda.synchronize(); torch.cuda.empty_cache()
    torch.cuda.nvtx.range_push("x"); torch.cuda.nvtx.range_pop()
    e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    e0.record(); e1.record(); torch.cuda.current_stream().synchronize()
    out["elapsed_ok"] = e0.elapsed_time(e1) >= 0
    print(json.dumps(out))
""")


def _python(env: dict[str, str], program: str = PROGRAM) -> subprocess.CompletedProcess:
    with socket.socket() as s:  # a free port for the one-rank group's store
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return subprocess.run([sys.executable, "-c", program], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PORT": str(port), **env})


def test_torch_in_a_standin_process(tmp_path):
    env = standin.node_env(2, 2.0, "H100", "127.0.0.1", tmp_path, None)
    env["CUDA_VISIBLE_DEVICES"] = "4,6"  # as Ray gives a worker of two GPUs
    (tmp_path / "reserve.json").write_text(json.dumps({"127.0.0.1": 0.5}))
    run = _python(env)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["available"] and out["count"] == 2 and out["name"] == "NVIDIA H100"
    assert out["total"] == 2 * GIB
    assert out["devices"] == ["cpu"]  # every one of them in host memory
    assert out["moves_copy"] == [1.0, 2.0, 3.0] and out["same"]
    assert out["counted"] == GIB and out["freed"] == 0
    assert out["free"] == 2 * GIB - GIB // 2 - out["before"] - GIB  # the fault's share taken
    assert out["oom"].startswith("CUDA out of memory. Tried to allocate 3.00 GiB. GPU 1 has a "
                                 "total capacity of 2.00 GiB")
    assert "fake GPU 6" in out["oom"] and "a gpu_oom fault holds 0.50 GiB" in out["oom"]
    assert out["thread"] == ["cpu"] and out["backend"] == "gloo" and out["elapsed_ok"]


SEMANTICS = textwrap.dedent("""\
    import io, json, os, threading, numpy as np, torch, torch.distributed as dist
    out = {}
    os.environ["CUDA_VISIBLE_DEVICES"] = "5,6"  # as Ray sets it once the actor is placed
    out["count"] = torch.cuda.device_count()
    g = torch.ones(1024, device="cuda")
    out["moved"] = [g.cuda(1) is g, g.to("cuda:0") is g, g.to("cuda", copy=True) is g]
    held = lambda: [torch.cuda.memory_allocated(0), torch.cuda.memory_allocated(1)]
    h = g.cuda(1)
    out["held"] = held()
    t = torch.zeros(4)
    before = torch.cuda.memory_allocated(0)
    tt = t.to(g)
    out["to_other"] = [tt is t, torch.cuda.memory_allocated(0) - before]
    out["positional_copy"] = t.to(torch.float32, False, True) is t
    before = torch.cuda.memory_allocated(0)
    half = g.half()
    out["half"] = torch.cuda.memory_allocated(0) - before
    a = np.zeros(3, dtype=np.float32)
    x = torch.as_tensor(a, device="cuda"); x += 1
    out["as_tensor_alias"] = float(a[0])
    s = g.untyped_storage(); before = torch.cuda.memory_allocated(0)
    s.resize_(0); out["resized"] = before - torch.cuda.memory_allocated(0)
    buf = io.BytesIO(); torch.save({"w": torch.ones(2)}, buf); buf.seek(0)
    out["load"] = str(torch.load(buf, map_location="cuda")["w"].device)
    out["pinned"] = torch.empty(3, pin_memory=True).shape[0]
    seen = []
    class Own(threading.Thread):
        def run(self):
            seen.append(str(torch.ones(1).cuda().device))
    th = Own(); th.start(); th.join()
    out["thread"] = seen
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=os.environ["PORT"])
    dist.init_process_group("nccl", rank=0, world_size=1)
    grp = dist.new_group([0], None, "nccl")
    import datetime
    dist.barrier(timeout=datetime.timedelta(seconds=30))
    out["group"] = dist.get_backend(grp)
    dist.destroy_process_group()
    with torch.cuda.device(1):
        out["device_ctx"] = torch.cuda.current_device()
    try:
        torch.empty(3 * 256, 1024, 1024, device="cuda:1")
    except torch.OutOfMemoryError as e:
        out["oom_gpu"] = "fake GPU 6" in str(e)
    print(json.dumps(out))
""")


def test_moves_copies_casts_and_frees_as_on_a_gpu(tmp_path):
    """The cases where a stand-in is easily wrong: the GPUs Ray sets after torch was imported,
    moves between fake GPUs, ``copy=True``, ``.to(other)``, a cast, ``as_tensor`` of an array,
    ``resize_`` (FSDP's way to free), ``torch.load(map_location="cuda")``, a pinned factory, a
    thread class with its own ``run``, NCCL asked for positionally, ``barrier(timeout=)``."""
    env = standin.node_env(2, 2.0, "H100", "127.0.0.1", tmp_path, None)
    run = _python(env, SEMANTICS)
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.splitlines()[-1])
    assert out["count"] == 2 and out["oom_gpu"]
    assert out["moved"] == [False, True, False]
    assert out["held"][1] == 4096 and out["held"][0] >= 4096
    assert out["to_other"] == [False, 16] and not out["positional_copy"]
    assert out["half"] == 2048 and out["as_tensor_alias"] == 0.0 and out["resized"] == 4096
    assert out["load"] == "cpu" and out["pinned"] == 3 and out["thread"] == ["cpu"]
    assert out["group"] == "gloo" and out["device_ctx"] == 1


def test_without_the_variable_torch_is_left_alone(tmp_path):
    env = standin.without(standin.node_env(2, 2.0, "", "127.0.0.1", tmp_path, None))
    env["PYTHONPATH"] = str(standin.BOOT)  # the hook present, the stand-in not asked for
    run = _python({**env, standin.VAR: "0"}, "import torch; print(torch.cuda.is_available())")
    assert run.returncode == 0 and run.stdout.strip() == "False", run.stderr[-2000:]


def test_the_boot_hook_runs_the_sitecustomize_it_hides(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os; os.environ['HIDDEN_RAN'] = '1'\n")
    env = standin.node_env(1, 1.0, "", "127.0.0.1", tmp_path, str(other))
    run = _python(env, "import os, torch; print(os.environ.get('HIDDEN_RAN'), "
                       "torch.cuda.device_count())")
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split() == ["1", "1"]


VLLM_RANK = textwrap.dedent("""\
    import json, os, sys, torch
    from vllm.distributed.device_communicators.pynccl import PyNcclCommunicator
    from vllm.distributed.utils import StatelessProcessGroup
    rank = int(sys.argv[1])
    pg = StatelessProcessGroup.create(host="127.0.0.1", port=int(os.environ["PORT"]), rank=rank,
                                      world_size=2)
    comm = PyNcclCommunicator(pg, device=torch.cuda.current_device())
    weight = torch.arange(6.0, device="cuda") if rank == 0 else torch.empty(6, device="cuda")
    comm.broadcast(weight, src=0, stream=torch.cuda.current_stream())
    out = {"kind": type(comm).__name__, "disabled": comm.disabled, "got": weight.tolist()}
    if rank == 1:  # a linear layer of vLLM's CPU build keeps its weight where a push lands
        from vllm.model_executor.layers import utils
        layer = torch.nn.Linear(3, 2, bias=False)
        utils.dispatch_cpu_unquantized_gemm(layer, remove_weight=True)
        x = torch.ones(1, 3)
        before = utils.cpu_unquantized_gemm(layer, x, layer.weight).tolist()
        layer.weight.data.copy_(torch.ones(2, 3))
        out["gemm"] = [before, utils.cpu_unquantized_gemm(layer, x, layer.weight).tolist()]
        out["kept"] = tuple(layer.weight.shape)
    print(json.dumps(out))
""")


def test_vllms_nccl_communicator_is_gloo_and_its_linear_weights_stay(tmp_path):
    """What OpenRLHF's weight push needs of vLLM's CPU build under the stand-in: its
    PyNcclCommunicator (NCCL-less there, it disabled itself and a broadcast did nothing) moves
    the tensor over gloo, and a linear layer's weight, updated in place, is the one used."""
    pytest.importorskip("vllm")
    env = {**os.environ, **standin.node_env(1, 1.0, "", "127.0.0.1", tmp_path, None)}
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        env["PORT"] = str(s.getsockname()[1])
    ranks = [subprocess.Popen([sys.executable, "-c", VLLM_RANK, str(r)], env=env, text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE) for r in (0, 1)]
    outs = [r.communicate(timeout=300) for r in ranks]
    for r, (_out, err) in zip(ranks, outs, strict=True):
        assert r.returncode == 0, err[-3000:]
    first, second = (json.loads(out.splitlines()[-1]) for out, _ in outs)
    assert first["kind"] == second["kind"] == "GlooCommunicator"
    assert not first["disabled"] and second["got"] == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]
    assert second["kept"] == [2, 3] and second["gemm"][1] == [[3.0, 3.0]]
    assert "made on gloo (rank 1 of 2" in outs[1][1]
