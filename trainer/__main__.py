"""``python -m trainer --config PRESET|PATH [key=value ...]`` on the cluster named by RAY_ADDRESS.

Also runs as a Ray Job: ``ray job submit --address http://<head>:<dashboard> -- python -m trainer
--config PRESET|PATH``. Exit codes: 0 completed, 2 failed with a typed error (see ``events.jsonl``).
"""

from __future__ import annotations

import argparse
import os
import sys

from trainer.config import load_config, preflight
from trainer.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m trainer", description=__doc__.splitlines()[0])
    ap.add_argument("--config", required=True, help="a preset (grpo_tiny, ppo_tiny) or the path "
                    "of a trainer YAML file")
    ap.add_argument("overrides", nargs="*", help="dotted overrides: total_steps=40 actor.lr=3e-3")
    args = ap.parse_args(argv)
    try:
        cfg = load_config(args.config, args.overrides)
        preflight(cfg)  # before Ray and torch load: a bad config is refused in well under a second
    except ConfigError as e:
        print(f"trainer: {e}", file=sys.stderr)
        return 2
    # read by Ray when it is imported: a driver whose head (GCS) is gone exits after this long
    # instead of Ray's 60 s default
    from rlsim.ray_internals import driver_env

    for key, value in driver_env(cfg.fault_tolerance.gcs_reconnect_timeout_s).items():
        os.environ.setdefault(key, value)
    from trainer.driver import run  # imports ray and torch: only once the config is sound

    return run(cfg)


def exit_now(code: int) -> None:
    """End the process with ``code`` once Ray is disconnected and output flushed, skipping the
    interpreter's teardown of torch and Ray's modules: measured here, 0.6-1.2 s of CPU after
    the event log was already closed, paid by every trainer run (and every twin) a scenario
    starts. Everything the run writes is closed and fsync'd before ``run`` returns."""
    if "ray" in sys.modules:
        import ray

        ray.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
