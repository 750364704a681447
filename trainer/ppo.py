"""PPO with a critic and GAE (Schulman et al., 2017), KL to a frozen reference folded into reward.

One step: sample, score, compute per-token rewards ``-kl_coef * (logp - ref_logp)`` plus the task
score on the last token, values from the critic, GAE advantages (whitened) and returns; then
update the actor (clipped surrogate) and the critic (clipped value loss).
"""

from __future__ import annotations

import torch

from trainer.losses import rollout_metrics


def gae(rewards: torch.Tensor, values: torch.Tensor, gamma: float, lam: float):
    """Generalised advantage estimation over response tokens; the episode ends after the last."""
    adv = torch.zeros_like(rewards)
    last = torch.zeros(rewards.shape[0])
    for t in reversed(range(rewards.shape[1])):
        nxt = values[:, t + 1] if t + 1 < rewards.shape[1] else torch.zeros(rewards.shape[0])
        delta = rewards[:, t] + gamma * nxt - values[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last
    return adv, adv + values


def whiten(x: torch.Tensor) -> torch.Tensor:
    return (x - x.mean()) / (x.std() + 1e-6)


def step(roles, prompts: torch.Tensor, seeds: list[int], cfg) -> dict[str, float]:
    """One PPO step through the role groups (``trainer.groups.Roles``)."""
    seqs = roles.generate(prompts, seeds)
    scores = roles.reward(prompts, seqs)
    ref_logp = roles.logprobs("ref", seqs)
    old_logp = roles.logprobs("actor", seqs)
    values = roles.values(seqs)
    token_rewards = -cfg.algo.kl_coef * (old_logp - ref_logp)
    token_rewards[:, -1] += scores
    adv, returns = gae(token_rewards, values, cfg.algo.gamma, cfg.algo.lam)
    metrics = roles.train("critic", {"seqs": seqs, "returns": returns, "old_values": values})
    metrics |= roles.train("actor", {"seqs": seqs, "adv": whiten(adv), "old_logp": old_logp})
    roles.sync_weights()
    return rollout_metrics(scores, old_logp, ref_logp) | {
        "rollout/value_mean": values.mean().item(), **metrics}
