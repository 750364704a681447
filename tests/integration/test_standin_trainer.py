"""The reference trainer on ``cuda`` through the device stand-in ends bit-identical to its run on
the CPU: the same scenario twice on a 2-node cluster of fake GPUs, once with ``cuda_standin``.

Under the stand-in each worker places its models, batches and optimizer state on ``cuda:0``
(torch.cuda answers for the fake GPU Ray gave it), asks NCCL for its process group (the stand-in
makes it gloo on the node's address) and DeepSpeed runs on its CPU accelerator; every number is
still the CPU's, so the two runs' metrics and final weights must be equal bit for bit. The
timeline says the stand-in was in force, and each worker says which device it used.
"""

from __future__ import annotations

import pytest

from rlsim.checks.baseline import _metrics, _same_weights
from rlsim.history import read_events
from rlsim.scenario.loader import load
from rlsim.scenario.runner import play

pytestmark = [pytest.mark.integration]

SCENARIO = """\
name: {name}
cluster: {{nodes: 2, gpus_per_node: 1, accelerator: H100, cuda_standin: {standin}}}
trainer:
  config: grpo_tiny
  overrides: {{total_steps: 4, save_freq: 4}}
expect:
  - completes: true
  - final_step: 4
"""


def _run(tmp_path, name: str, standin: bool):
    path = tmp_path / f"{name}.yaml"
    path.write_text(SCENARIO.format(name=name, standin=str(standin).lower()))
    out = tmp_path / "out" / name
    result = play(load(path), out)
    assert result.ok, [(v.check, v.message) for v in result.checks]
    return out


def _devices(out) -> set[str]:
    """The device each worker of the run said it used."""
    return {w.get("device") for e in read_events(out / "run" / "events.jsonl")
            if e.get("type") == "placement" for w in e.get("workers", [])}


def test_the_reference_trainer_on_cuda_through_the_standin_equals_its_cpu_run(tmp_path):
    cpu = _run(tmp_path, "on_cpu", False)
    cuda = _run(tmp_path, "on_cuda", True)

    assert _devices(cuda) == {"cuda:0 (NVIDIA H100)"}
    assert _devices(cpu) == {"cpu"}
    timeline = read_events(cuda / "timeline.jsonl")
    assert any(e["type"] == "cuda_standin" for e in timeline), [e["type"] for e in timeline]

    a, _ = _metrics(cpu / "run")
    b, _ = _metrics(cuda / "run")
    assert a and a == b, (a, b)
    same, what = _same_weights(cuda / "run", cpu / "run", 4)
    assert same, what
