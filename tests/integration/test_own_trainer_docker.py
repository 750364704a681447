"""The unmodified Ray Train job of scenarios/ray_train_node_lost.yaml on container nodes: the
driver runs in the head container, Ray Train's controller and workers in theirs, and the adapter's
callback writes to the run directory through the nodes' shared mount. Here rather than in the
sequential docker step of the gate: the run spends most of its minute waiting on Ray Train's
start-up, which overlaps with the other tests here."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.backends.docker_engine import engine_problem
from rlsim.checks import judge
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario
from rlsim.scenario.session import require

pytestmark = [pytest.mark.integration, pytest.mark.docker]

SCENARIO = Path(__file__).resolve().parents[2] / "scenarios" / "ray_train_node_lost.yaml"


def test_ray_train_job_loses_a_node_on_container_nodes(tmp_path):
    require(engine_problem())
    pytest.importorskip("ray.train.v2", reason="needs Ray Train: pip install ray[train]")
    outcome = run_scenario(load(SCENARIO), tmp_path / "out", backend="docker")
    failed = [f"{v.check}: {v.message}" for v in judge(outcome) if not v.ok]
    assert not failed, "\n".join(failed + [outcome.output[-3000:]])
