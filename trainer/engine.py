"""Training engines behind one interface: DeepSpeed ZeRO 0-3 and torch DDP.

Both run inside an initialised default process group (gloo on CPU, NCCL on GPUs); gradients of
ranks on different nodes cross that group. ``train(micro_batches, loss_fn)`` is one optimizer step
with gradient accumulation; ``save``/``load`` are collective and restore weights, optimizer and LR
schedule exactly; ``full_state()`` is the whole model on every rank (gathered under ZeRO-3).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from trainer.config import OptimConfig

LossFn = Callable[[torch.nn.Module, dict], tuple[torch.Tensor, dict[str, float]]]


def _optimizer(module: torch.nn.Module, oc: OptimConfig):
    opt = torch.optim.AdamW(module.parameters(), lr=oc.lr, weight_decay=oc.weight_decay,
                            foreach=False)
    warm = max(oc.warmup_steps, 0)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / (warm + 1)))
    return opt, sched


def _skip_shm_comm_build() -> None:
    """On CPU, DeepSpeed's comm backend JIT-compiles a C++ shared-memory all-reduce op with g++ the
    first time it starts (~30 s on 2 cores, again in every fresh container). The op serves only
    ``inference_all_reduce`` between ranks on one host; training all-reduces go through
    torch.distributed (gloo) either way, so marking it incompatible changes no number."""
    import deepspeed.ops

    if not torch.cuda.is_available():
        deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def _skip_import_time_compile() -> None:
    """DeepSpeed's ZeRO code imports its Muon optimizer module on first use (to recognise Muon),
    and that module applies ``torch.compile`` at import, which loads TorchInductor: 2.4 s of a
    worker's 2.7 s engine set-up on a 2-core machine, in every actor of every attempt. The trainer
    compiles nothing, so TorchDynamo is switched off in its workers (``torch.compile`` becomes a
    no-op decorator) unless the environment says otherwise (``TORCHDYNAMO_DISABLE=0``).
    TorchDynamo reads that variable once, when it is imported: a warm worker imported it before
    this runs (rlsim preloads it), so its setting is made here too."""
    if os.environ.setdefault("TORCHDYNAMO_DISABLE", "1") == "1":
        import torch._dynamo

        torch._dynamo.config.disable = True


class DeepSpeedEngine:
    def __init__(self, module: torch.nn.Module, oc: OptimConfig, micro: int, accum: int) -> None:
        import deepspeed

        _skip_shm_comm_build()
        _skip_import_time_compile()
        opt, sched = _optimizer(module, oc)
        bucket = int(min(5e8, max(1e5, sum(p.numel() for p in module.parameters()))))
        config = {
            "train_micro_batch_size_per_gpu": micro,
            "gradient_accumulation_steps": accum,
            "train_batch_size": micro * accum * dist.get_world_size(),
            "gradient_clipping": oc.grad_clip,
            # DeepSpeed's default buckets (5e8 elements) are sized for GPUs: allocated per step
            # they cost ~2 s on a CPU; a bucket the size of the model is enough
            "zero_optimization": {"stage": oc.zero_stage, "reduce_bucket_size": bucket,
                                  "allgather_bucket_size": bucket,
                                  "stage3_prefetch_bucket_size": bucket},
            "zero_allow_untested_optimizer": True,
            "steps_per_print": 1 << 30,
        }
        self.engine, self.opt, _, self.sched = deepspeed.initialize(
            model=module, optimizer=opt, lr_scheduler=sched, config=config)
        self.module = self.engine.module
        self.zero3 = oc.zero_stage == 3

    def forward_module(self) -> torch.nn.Module:
        return self.engine

    def train(self, micro_batches: list[dict], loss_fn: LossFn) -> dict[str, float]:
        stats: list[dict[str, float]] = []
        for mb in micro_batches:
            loss, info = loss_fn(self.engine, mb)
            self.engine.backward(loss)  # DeepSpeed divides by the accumulation steps itself
            self.engine.step()
            stats.append(info)
        norm = self.engine.get_global_grad_norm()
        return _mean(stats) | {"grad_norm": float(norm or 0.0), "lr": self.sched.get_last_lr()[0]}

    def full_state(self) -> dict[str, torch.Tensor]:
        import deepspeed

        params = list(self.module.parameters()) if self.zero3 else []
        with deepspeed.zero.GatheredParameters(params, modifier_rank=None, enabled=self.zero3):
            return {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    def save(self, path: Path) -> None:
        self.engine.save_checkpoint(str(path), tag="ds", save_latest=False)

    def load(self, path: Path) -> None:
        loaded, _ = self.engine.load_checkpoint(str(path), tag="ds", load_optimizer_states=True,
                                                load_lr_scheduler_states=True)
        if loaded is None:
            raise FileNotFoundError(f"{path}: DeepSpeed found no checkpoint to load")


class DDPEngine:
    def __init__(self, module: torch.nn.Module, oc: OptimConfig, micro: int, accum: int) -> None:
        from torch.nn.parallel import DistributedDataParallel

        self.module = module
        self.ddp = DistributedDataParallel(module)
        self.opt, self.sched = _optimizer(module, oc)
        self.clip = oc.grad_clip

    def forward_module(self) -> torch.nn.Module:
        return self.ddp

    def train(self, micro_batches: list[dict], loss_fn: LossFn) -> dict[str, float]:
        stats: list[dict[str, float]] = []
        for i, mb in enumerate(micro_batches):
            last = i == len(micro_batches) - 1
            with contextlib.nullcontext() if last else self.ddp.no_sync():
                loss, info = loss_fn(self.ddp, mb)
                (loss / len(micro_batches)).backward()
            stats.append(info)
        norm = torch.nn.utils.clip_grad_norm_(self.module.parameters(), self.clip or float("inf"))
        self.opt.step()
        self.sched.step()
        self.opt.zero_grad(set_to_none=True)
        return _mean(stats) | {"grad_norm": float(norm), "lr": self.sched.get_last_lr()[0]}

    def full_state(self) -> dict[str, torch.Tensor]:
        return {k: v.detach().clone() for k, v in self.module.state_dict().items()}

    def save(self, path: Path) -> None:
        if dist.get_rank() == 0:  # DDP replicas are identical: rank 0 writes for all
            path.mkdir(parents=True, exist_ok=True)
            state = {"model": self.module.state_dict(), "optim": self.opt.state_dict(),
                     "sched": self.sched.state_dict()}
            torch.save(state, path / "ddp.pt")
        dist.barrier()

    def load(self, path: Path) -> None:
        state = torch.load(path / "ddp.pt", map_location="cpu", weights_only=True)
        self.module.load_state_dict(state["model"])
        self.opt.load_state_dict(state["optim"])
        self.sched.load_state_dict(state["sched"])


def make_engine(module: torch.nn.Module, oc: OptimConfig, micro: int, accum: int):
    cls = DeepSpeedEngine if oc.engine == "deepspeed" else DDPEngine
    return cls(module, oc, micro, accum)


def _mean(stats: list[dict[str, float]]) -> dict[str, float]:
    return {k: sum(s[k] for s in stats) / len(stats) for k in stats[0]} if stats else {}
