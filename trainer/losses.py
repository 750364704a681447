"""Loss terms both algorithms use, token-level and pure (tensors in, scalar out), and the rollout
metrics both report."""

from __future__ import annotations

import torch


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                        clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (to minimise) and the share of tokens clipped."""
    ratio = torch.exp(logp - old_logp)
    unclipped, clipped = ratio * adv, torch.clamp(ratio, 1 - clip, 1 + clip) * adv
    return -torch.min(unclipped, clipped).mean(), (unclipped > clipped).float().mean()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref): unbiased and always >= 0 (GRPO's KL loss)."""
    d = ref_logp - logp
    return (torch.exp(d) - d - 1).mean()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    return 0.5 * torch.max((values - returns) ** 2, (clipped - returns) ** 2).mean()


def rollout_metrics(rewards: torch.Tensor, old_logp: torch.Tensor,
                    ref_logp: torch.Tensor) -> dict[str, float]:
    """``rollout/*``: reward mean and max, share solved (reward 1), mean log-ratio to the ref."""
    return {
        "rollout/reward_mean": rewards.mean().item(),
        "rollout/reward_max": rewards.max().item(),
        "rollout/solved": (rewards == 1).float().mean().item(),
        "rollout/kl_ref": (old_logp - ref_logp).mean().item(),
    }
