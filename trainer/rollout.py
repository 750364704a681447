"""Rollout engines behind one interface: a batched torch sampler (CPU) and vLLM (GPU hosts).

``generate(prompts, seeds) -> (rows, prompt+response) token tensor`` and ``load_weights(state)``.
vLLM is imported only when ``rollout.engine=vllm`` is chosen (the ``gpu`` extra).
"""

from __future__ import annotations

from typing import Protocol

import torch

from trainer.config import TrainerConfig
from trainer.model import build_policy, sample


class RolloutEngine(Protocol):
    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor: ...

    def load_weights(self, state: dict[str, torch.Tensor]) -> None: ...


class TorchSampler:
    """A copy of the policy sampling on CPU; weights replaced after every actor update."""

    def __init__(self, cfg: TrainerConfig) -> None:
        self.cfg = cfg
        self.model = build_policy(cfg.model, cfg.seed).eval()

    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor:
        rc = self.cfg.rollout
        return sample(self.model, prompts, rc.n_samples, rc.response_length, rc.temperature, seeds)

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:
        self.model.load_state_dict(state, strict=True)


class VLLMSampler:
    """vLLM on a real GPU host. Weights are pushed into the engine's model after every update."""

    def __init__(self, cfg: TrainerConfig) -> None:
        try:
            from vllm import LLM, SamplingParams
        except ImportError as e:  # pragma: no cover - GPU hosts only
            raise ImportError(
                "rollout.engine=vllm needs vLLM on a GPU host: pip install 'rlsim[gpu]'"
            ) from e
        import tempfile

        rc = cfg.rollout
        path = cfg.model.path
        if path is None:  # vLLM loads from disk: write the seeded random init once
            path = tempfile.mkdtemp(prefix="rlsim-vllm-")
            build_policy(cfg.model, cfg.seed).save_pretrained(path)
        self.llm = LLM(model=path, tensor_parallel_size=rc.tensor_parallel_size,
                       gpu_memory_utilization=rc.gpu_memory_utilization, skip_tokenizer_init=True,
                       seed=cfg.seed, enforce_eager=True)
        self.params = SamplingParams
        self.cfg = cfg

    def generate(self, prompts: torch.Tensor, seeds: list[int]) -> torch.Tensor:  # pragma: no cover
        rc = self.cfg.rollout
        requests = [{"prompt_token_ids": p.tolist()} for p in prompts]
        params = [self.params(n=rc.n_samples, max_tokens=rc.response_length,
                              min_tokens=rc.response_length, temperature=rc.temperature, seed=s,
                              detokenize=False) for s in seeds]
        outs = self.llm.generate(requests, params, use_tqdm=False)
        rows = [list(p.tolist()) + list(c.token_ids) for p, o in zip(prompts, outs, strict=True)
                for c in o.outputs]
        return torch.tensor(rows, dtype=torch.long)

    def load_weights(self, state: dict[str, torch.Tensor]) -> None:  # pragma: no cover
        model = self.llm.llm_engine.model_executor.driver_worker.model_runner.model
        model.load_weights(state.items())


def make_engine(cfg: TrainerConfig) -> RolloutEngine:
    return VLLMSampler(cfg) if cfg.rollout.engine == "vllm" else TorchSampler(cfg)
