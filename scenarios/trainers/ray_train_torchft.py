"""A Ray Train job whose framework recovers by itself: PyTorch's torchft under Ray Train's
``TorchftConfig`` (Ray 2.57+), written as Ray's own torchft example is. Each worker is a replica
group of one; torchft's lighthouse forms a quorum every step, and the replicas average their
gradients over gloo. When a replica group is lost, Ray Train replaces only that group, in place;
the new worker heals its weights from a survivor (torchft's checkpoint transport), and no
checkpoint is loaded: the job is never restarted whole. Ray Train's and torchft's public API
only; nothing here knows of rlsim.

    python scenarios/trainers/ray_train_torchft.py RUN_DIR   (RAY_ADDRESS set; STEPS, STEP_S,
                                                             WORKERS, MIN_REPLICAS from the env)
"""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta
from pathlib import Path

import ray.train
import torch
import torch.nn as nn
from ray.train import FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.train.v2.torch.torchft_config import TorchftConfig
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
from torchft.checkpointing.pg_transport import PGTransport


def train_loop(config: dict) -> None:
    rank = ray.train.get_context().get_world_rank()
    torch.manual_seed(0)
    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    pg = ProcessGroupGloo(timeout=timedelta(seconds=30))
    manager = Manager(
        pg=pg, min_replica_size=config["min_replicas"],
        load_state_dict=lambda s: (model.load_state_dict(s["model"]),
                                   opt.load_state_dict(s["opt"])),
        state_dict=lambda: {"model": model.state_dict(), "opt": opt.state_dict()},
        world_size=1, rank=0, replica_id=f"replica_{rank}", timeout=timedelta(seconds=60),
        checkpoint_transport=PGTransport(pg, timeout=timedelta(seconds=30),
                                         device=torch.device("cpu")))
    model = DistributedDataParallel(manager, model)
    opt = Optimizer(manager, opt)
    gen = torch.Generator().manual_seed(rank)
    x = torch.randn(64, 8, generator=gen)
    y = x.sum(dim=1, keepdim=True)
    while manager.current_step() < config["steps"]:
        opt.zero_grad()
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        time.sleep(config["step_s"])
        ray.train.report({"step": manager.current_step(), "loss": loss.item()})
    manager.shutdown()  # a replica that finished must not leave the others in its quorum


def main(run_dir: Path) -> int:
    config = {"steps": int(os.environ.get("STEPS", "20")),
              "step_s": float(os.environ.get("STEP_S", "0.3")),
              "min_replicas": int(os.environ.get("MIN_REPLICAS", "2"))}
    trainer = TorchTrainer(
        train_loop, train_loop_config=config,
        scaling_config=ScalingConfig(num_workers=int(os.environ.get("WORKERS", "2")),
                                     use_gpu=False, resources_per_worker={"MOCK_GPU": 1},
                                     placement_strategy="SPREAD"),
        torch_config=TorchftConfig(lighthouse_kwargs={"min_replicas": config["min_replicas"]},
                                   backend="gloo"),
        run_config=RunConfig(name="ray_train_torchft", storage_path=str(run_dir / "ray_results"),
                             failure_config=FailureConfig(max_failures=3)))
    result = trainer.fit()
    print(f"finished: {result.metrics}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1])))
