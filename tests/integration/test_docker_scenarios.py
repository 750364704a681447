"""The catalogue on container nodes: the README's main scenario (4 nodes x 8 fake GPUs, a node
killed mid-run, resume equal to the fault-free twin) with ``--backend docker``, as
``pytest scenarios/ --backend docker -k node_failure_mid_run`` runs it."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.checks import judge
from rlsim.pytest_plugin import require
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario

ROOT = Path(__file__).parents[2]


@pytest.mark.integration
@pytest.mark.docker
def test_node_failure_mid_run_on_container_nodes(tmp_path):
    from rlsim.backends.docker import engine_problem

    require(engine_problem())
    outcome = run_scenario(load(ROOT / "scenarios" / "node_failure_mid_run.yaml"), tmp_path,
                           backend="docker")
    verdicts = judge(outcome)
    assert all(v.ok for v in verdicts), [f"{v.check}: {v.message}" for v in verdicts if not v.ok]
    ready = next(e for e in outcome.timeline if e["type"] == "cluster_ready")
    assert all(a.startswith("10.177.") for a in ready["nodes"])  # container addresses
    killed = next(e for e in outcome.timeline if e["type"] == "fault_injected")
    assert killed["fault"] == "kill_node" and killed["pids"]
