"""The reference RL trainer rlsim's scenarios drive: GRPO and PPO on Ray, fault-tolerant.

``python -m trainer --config grpo_tiny`` (see ``trainer/config.py``).

Importing the package imports nothing else (no torch, no Ray), so a harness may read its event
types (:mod:`trainer.events`) cheaply. What it shares with rlsim is :mod:`rlsim.contract`.
"""
