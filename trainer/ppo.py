"""PPO with a critic and GAE (Schulman et al., 2017), KL to a frozen reference folded into reward.

One step: sample, score, compute per-token rewards ``-kl_coef * (logp - ref_logp)`` plus the task
score on the last token, values from the critic, GAE advantages (whitened) and returns; then
update the actor (clipped surrogate) and the critic (clipped value loss).

``step`` runs on the driver, which holds arrays; the tensor math (:func:`targets`) runs on a
worker, in torch (``Roles.compute``), so this module imports no torch (see :mod:`trainer.losses`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from trainer.losses import rollout_metrics

if TYPE_CHECKING:
    import numpy as np
    import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation over response tokens; the episode ends after the last."""
    adv = rewards.new_zeros(rewards.shape)
    last = rewards.new_zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        nxt = values[:, t + 1] if t + 1 < rewards.shape[1] else rewards.new_zeros(rewards.shape[0])
        delta = rewards[:, t] + gamma * nxt - values[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    return adv, adv + values


def whiten(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-6)


def targets(scores: torch.Tensor, old_logp: torch.Tensor, ref_logp: torch.Tensor,
            values: torch.Tensor, kl_coef: float, gamma: float,
            lam: float) -> tuple[torch.Tensor, torch.Tensor, dict[str, float]]:
    """On a worker: the whitened advantages, the returns, and the rollout metrics."""
    token_rewards = -kl_coef * (old_logp - ref_logp)
    token_rewards[:, -1] += scores
    adv, returns = gae(token_rewards, values, gamma, lam)
    return whiten(adv), returns, rollout_metrics(scores, old_logp, ref_logp) | {
        "rollout/value_mean": values.mean().item()}


def step(roles, prompts: np.ndarray, seeds: list[int], cfg) -> dict[str, float]:
    """One PPO step through the role groups (``trainer.groups.Roles``)."""
    seqs = roles.generate(prompts, seeds)
    scores = roles.reward(prompts, seqs)
    ref_logp = roles.logprobs("ref", seqs)
    old_logp = roles.logprobs("actor", seqs)
    values = roles.values(seqs)
    adv, returns, rollout = roles.compute(targets, scores, old_logp, ref_logp, values,
                                          cfg.algo.kl_coef, cfg.algo.gamma, cfg.algo.lam)
    metrics = roles.train("critic", {"seqs": seqs, "returns": returns, "old_values": values})
    metrics |= roles.train("actor", {"seqs": seqs, "adv": adv, "old_logp": old_logp})
    roles.sync_weights()
    return rollout | metrics
