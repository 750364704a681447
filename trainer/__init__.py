"""The reference RL trainer rlsim's scenarios drive: GRPO and PPO on Ray, fault-tolerant.

``python -m trainer --config fixtures/trainer/grpo_tiny.yaml`` (see ``trainer/config.py``).

Importing the package imports nothing else (no torch, no Ray), so a harness may read its
contract (:mod:`trainer.contract`) and event types (:mod:`trainer.events`) cheaply.
"""
