"""The model: a GPT-2-shaped causal LM from a ``transformers`` config, random init, no downloads.

The critic is the same backbone with a one-output token head (``GPT2ForTokenClassification``).
Dropout is off so a forward pass is a pure function of weights and input (exact resume needs it).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from trainer.config import ModelConfig


def _config(mc: ModelConfig, **extra):
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=mc.vocab_size, n_positions=mc.n_positions, n_embd=mc.n_embd,
        n_layer=mc.n_layer, n_head=mc.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=None, eos_token_id=None, pad_token_id=None, **extra,
    )


def build_policy(mc: ModelConfig, seed: int) -> torch.nn.Module:
    """The actor/ref/rollout model: the same weights in every process for the same seed."""
    from transformers import GPT2LMHeadModel

    if mc.path:
        return GPT2LMHeadModel.from_pretrained(mc.path, attn_implementation="eager")
    with torch.random.fork_rng(devices=[]):  # seeded init must not reset the caller's RNG
        torch.manual_seed(seed)
        return GPT2LMHeadModel(_config(mc, attn_implementation="eager"))


def build_critic(mc: ModelConfig, seed: int) -> torch.nn.Module:
    from transformers import GPT2ForTokenClassification

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed + 1)
        return GPT2ForTokenClassification(_config(mc, num_labels=1, classifier_dropout=0.0,
                                                  attn_implementation="eager"))


def response_logprobs(model: torch.nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """Log-probabilities of each response token under ``model``: shape (rows, response_len)."""
    logits = model(input_ids=seqs).logits[:, prompt_len - 1 : -1].float()
    return torch.gather(F.log_softmax(logits, -1), 2, seqs[:, prompt_len:, None]).squeeze(2)


def response_values(critic: torch.nn.Module, seqs: torch.Tensor, prompt_len: int) -> torch.Tensor:
    """The critic's value before each response token: shape (rows, response_len)."""
    return critic(input_ids=seqs).logits[:, prompt_len - 1 : -1, 0].float()


@torch.no_grad()
def sample(model: torch.nn.Module, prompts: torch.Tensor, n: int, length: int,
           temperature: float, seeds: list[int]) -> torch.Tensor:
    """``n`` responses per prompt, batched; prompt ``i``'s draws come from its own generator seeded
    with ``seeds[i]``, so a response does not depend on how prompts were split over engines."""
    gens = [torch.Generator().manual_seed(s) for s in seeds]
    seqs = prompts.repeat_interleave(n, dim=0)
    for _ in range(length):
        logits = model(input_ids=seqs).logits[:, -1].float() / temperature
        probs = torch.softmax(logits, -1)
        noise = torch.cat([torch.rand(n, 1, generator=g) for g in gens])
        # inverse-CDF draw with per-prompt uniforms: one categorical sample per row
        cdf = probs.cumsum(-1)
        nxt = (cdf < noise * cdf[:, -1:]).sum(-1, keepdim=True).clamp(max=probs.shape[1] - 1)
        seqs = torch.cat([seqs, nxt], dim=1)
    return seqs
