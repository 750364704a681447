"""Loss terms both algorithms use, token-level and pure (tensors in, scalar out), and the rollout
metrics both report.

They run on the workers, on torch tensors, and are written with tensor methods only, so that this
module imports no torch: the driver, which names the algorithms' math for a worker to run, starts
without it (importing torch is most of a driver's start). ``x.exp()``, ``x.clamp()``,
``a.minimum(b)`` are the same kernels as ``torch.exp``, ``torch.clamp`` and ``torch.min(a, b)``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def clipped_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor,
                        clip: float) -> tuple[torch.Tensor, torch.Tensor]:
    """PPO's clipped surrogate (to minimise) and the share of tokens clipped."""
    ratio = (logp - old_logp).exp()
    unclipped, clipped = ratio * adv, ratio.clamp(1 - clip, 1 + clip) * adv
    return -unclipped.minimum(clipped).mean(), (unclipped > clipped).float().mean()


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Schulman's k3 estimator of KL(pi || ref): unbiased and always >= 0 (GRPO's KL loss)."""
    d = ref_logp - logp
    return (d.exp() - d - 1).mean()


def clipped_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor,
                       clip: float) -> torch.Tensor:
    clipped = old_values + (values - old_values).clamp(-clip, clip)
    return 0.5 * ((values - returns) ** 2).maximum((clipped - returns) ** 2).mean()


def rollout_metrics(rewards: torch.Tensor, old_logp: torch.Tensor,
                    ref_logp: torch.Tensor) -> dict[str, float]:
    """``rollout/*``: reward mean and max, share solved (reward 1), mean log-ratio to the ref."""
    return {
        "rollout/reward_mean": rewards.mean().item(),
        "rollout/reward_max": rewards.max().item(),
        "rollout/solved": (rewards == 1).float().mean().item(),
        "rollout/kl_ref": (old_logp - ref_logp).mean().item(),
    }
