"""What the process-group backends do with two ranks on one real GPU, as simulated nodes sharing
a host's GPU have them: ``python ci/gpu_collectives.py [OUT.json]`` (a GPU host; bounded).

NCCL is asked first: it refuses two ranks on one device, and the reference trainer then uses
gloo (trainer.host.choose_backend). gloo is then asked for each collective the trainer's engines
use (DDP: all_reduce, broadcast; DeepSpeed ZeRO: all_gather_into_tensor, reduce_scatter_tensor,
reduce) with CUDA tensors, each answer checked against the expected sum. One JSON object is
printed and written: each backend's and each collective's ok, or its error's first line.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

TIMEOUT = datetime.timedelta(seconds=30)


def _first(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0][:300]


def _gloo_ops(rank: int, world: int) -> dict[str, str]:
    dev = torch.device("cuda", 0)
    want = float(sum(range(1, world + 1)))
    found: dict[str, str] = {}

    def check(name, fn):
        try:
            ok = fn()
            found[name] = "ok" if ok else "wrong answer"
        except Exception as e:  # noqa: BLE001 - each op's own answer
            found[name] = f"error: {_first(e)}"

    def all_reduce():
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.all_reduce(t)
        return bool((t == want).all())

    def broadcast():
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.broadcast(t, 0)
        return bool((t == 1).all())

    def all_gather_into_tensor():
        out = torch.empty(4 * world, device=dev)
        dist.all_gather_into_tensor(out, torch.full((4,), float(rank + 1), device=dev))
        return out.tolist() == [float(r + 1) for r in range(world) for _ in range(4)]

    def reduce_scatter_tensor():
        out = torch.empty(4, device=dev)
        dist.reduce_scatter_tensor(out, torch.full((4 * world,), float(rank + 1), device=dev))
        return bool((out == want).all())

    def reduce():
        t = torch.full((4,), float(rank + 1), device=dev)
        dist.reduce(t, 0)
        return rank != 0 or bool((t == want).all())

    for name, fn in [("all_reduce", all_reduce), ("broadcast", broadcast),
                     ("all_gather_into_tensor", all_gather_into_tensor),
                     ("reduce_scatter_tensor", reduce_scatter_tensor), ("reduce", reduce)]:
        check(name, fn)
        dist.barrier()  # a failed op must not leave the ranks out of step
    return found


def _rank(rank: int, world: int, backend: str, port: int, results) -> None:
    torch.cuda.set_device(0)
    try:
        store = dist.TCPStore("127.0.0.1", port, world, is_master=rank == 0, timeout=TIMEOUT)
        dist.init_process_group(backend, store=store, rank=rank, world_size=world,
                                timeout=TIMEOUT, device_id=torch.device("cuda", 0)
                                if backend == "nccl" else None)
        if backend == "nccl":
            t = torch.ones(4, device="cuda:0")
            dist.all_reduce(t)
            torch.cuda.synchronize()
            results[rank] = {"all_reduce": "ok" if bool((t == world).all()) else "wrong answer"}
        else:
            results[rank] = _gloo_ops(rank, world)
        dist.destroy_process_group()
    except Exception as e:  # noqa: BLE001 - the backend's refusal is the answer
        results[rank] = {"error": _first(e), "trace": traceback.format_exc()[-1500:]}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run(backend: str, world: int) -> dict:
    ctx = mp.get_context("spawn")
    results = ctx.Manager().dict()
    port = _free_port()
    procs = [ctx.Process(target=_rank, args=(r, world, backend, port, results))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(90)
    hung = [r for r, p in enumerate(procs) if p.is_alive()]
    for p in procs:
        if p.is_alive():
            p.kill()
    return {"world": world, "hung_ranks": hung,
            "ranks": {r: results.get(r, {"error": f"exit code {p.exitcode}"})
                      for r, p in enumerate(procs)}}


def main() -> int:
    found = {"torch": torch.__version__, "cuda": torch.version.cuda,
             "nccl": ".".join(map(str, torch.cuda.nccl.version())) if torch.cuda.is_available()
             else None,
             "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
             "visible": os.environ.get("CUDA_VISIBLE_DEVICES")}
    if not torch.cuda.is_available():
        found["error"] = "no CUDA device visible"
    else:
        found["nccl_one_rank"] = run("nccl", 1)
        found["nccl_two_ranks_one_gpu"] = run("nccl", 2)
        found["gloo_two_ranks_one_gpu"] = run("gloo", 2)
    text = json.dumps(found, indent=1, default=str)
    print(text)
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
