"""Real DeepSpeed (ZeRO-1, ZeRO-3) and DDP on CPU, one process: save, load, continue bit-exact.

ZeRO-2 across two simulated nodes is covered by the integration test on a real cluster.
"""


import numpy as np
import pytest

from trainer.config import PRESETS, load_config
from trainer.inprocess import run_inprocess

FIXTURE = PRESETS / "grpo_tiny.yaml"


def metrics(rows):
    return [{k: v for k, v in m.items() if not k.startswith("perf/")} for m in rows]


@pytest.mark.parametrize("engine", [
    ["actor.engine=deepspeed", "actor.zero_stage=1"],
    ["actor.engine=deepspeed", "actor.zero_stage=3"],
    ["actor.engine=ddp"],
])
def test_stop_and_resume_equals_straight_run(tmp_path, engine, monkeypatch):
    monkeypatch.chdir(FIXTURE.parents[2])
    cfg = load_config(FIXTURE, [*engine, "total_steps=4", "actor.warmup_steps=2"])
    straight, w_straight = run_inprocess(cfg)
    half = cfg.model_copy(update={"total_steps": 2})
    first, _ = run_inprocess(half, save=tmp_path)
    rest, w_resumed = run_inprocess(cfg, first_step=2, load=tmp_path)
    assert metrics(first + rest) == metrics(straight)
    assert w_straight.keys() == w_resumed.keys()
    assert all(np.array_equal(w_straight[k], w_resumed[k]) for k in w_straight)
    # and training did move the weights (a resume that loads nothing would not match anyway):
    # the weights a run of no steps ends with are those every run starts from
    _, w_start = run_inprocess(cfg, first_step=cfg.total_steps)
    assert w_start.keys() == w_straight.keys()
    unmoved = [k for k in w_straight if np.array_equal(w_start[k], w_straight[k])]
    assert unmoved == [], f"4 steps of training left these weights as they started: {unmoved}"
    assert straight[-1]["train/actor_lr"] == cfg.actor.lr
