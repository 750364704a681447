"""GRPO (Shao et al., 2024): group-relative advantages, no critic, KL loss to a frozen reference.

One step: sample ``n_samples`` responses per prompt, score them with the rule-based reward,
normalise each reward within its prompt's group, and take clipped policy-gradient steps with a
k3 KL penalty to the reference policy. Metrics: ``rollout/*``, ``train/*``.

``step`` runs on the driver, which holds arrays; the tensor math (:func:`targets`) runs on a
worker, in torch (``Roles.compute``), so this module imports no torch (see :mod:`trainer.losses`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.losses import rollout_metrics

if TYPE_CHECKING:
    import numpy as np
    import torch

EPS = 1e-6


def group_advantages(rewards: torch.Tensor, group: int) -> torch.Tensor:
    """(r - mean of its group) / (std of its group + eps), one value per response."""
    r = rewards.view(-1, group)
    adv = (r - r.mean(1, keepdim=True)) / (r.std(1, keepdim=True) + EPS)
    return adv.reshape(-1)


def targets(rewards: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor, group: int,
            resp_len: int) -> tuple[torch.Tensor, dict[str, float]]:
    """On a worker: each response token's advantage, and the rollout metrics."""
    adv = group_advantages(rewards, group)[:, None].expand(-1, resp_len)
    return adv.contiguous(), rollout_metrics(rewards, old_logp, ref_logp)


def step(roles, prompts: np.ndarray, seeds: list[int], cfg) -> dict[str, float]:
    """One GRPO step through the role groups (``trainer.groups.Roles``)."""
    seqs = roles.generate(prompts, seeds)
    rewards = roles.reward(prompts, seqs)
    ref_logp = roles.logprobs("ref", seqs)
    old_logp = roles.logprobs("actor", seqs)
    adv, metrics = roles.compute(targets, rewards, old_logp, ref_logp, cfg.rollout.n_samples,
                                 cfg.rollout.response_length)
    batch = {"seqs": seqs, "adv": adv, "old_logp": old_logp, "ref_logp": ref_logp}
    metrics |= roles.train("actor", batch)
    roles.sync_weights()
    return metrics
