"""GRPO (Shao et al., 2024): group-relative advantages, no critic, KL loss to a frozen reference.

One step: sample ``n_samples`` responses per prompt, score them with the rule-based reward,
normalise each reward within its prompt's group, and take clipped policy-gradient steps with a
k3 KL penalty to the reference policy. Metrics: ``rollout/*``, ``train/*``.
"""

from __future__ import annotations

import torch

from trainer.losses import rollout_metrics

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps), one value per response."""
    r = rewards.view(-1, group)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + EPS)
    return adv.reshape(-1)


def step(roles, prompts: torch.Tensor, seeds: list[int], cfg) -> dict[str, float]:
    """One GRPO step through the role groups (``trainer.groups.Roles``)."""
    seqs = roles.generate(prompts, seeds)
    rewards = roles.reward(prompts, seqs)
    resp_len = cfg.rollout.response_length
    adv = group_advantages(rewards, cfg.rollout.n_samples)[:, None].expand(-1, resp_len)
    ref_logp = roles.logprobs("ref", seqs)
    old_logp = roles.logprobs("actor", seqs)
    batch = {"seqs": seqs, "adv": adv.contiguous(), "old_logp": old_logp, "ref_logp": ref_logp}
    metrics = roles.train("actor", batch)
    roles.sync_weights()
    return rollout_metrics(rewards, old_logp, ref_logp) | metrics
