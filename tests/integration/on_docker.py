"""Catalogue scenarios run on container nodes inside the main test run (one module per scenario,
so the two can run on both xdist workers at once). Here rather than in a sequential step after
it: a scenario alone spends most of its minute waiting (node start-up, Ray Train's start-up
chain), which overlaps with the other tests there."""

from __future__ import annotations

from pathlib import Path

from rlsim.backends.docker_engine import engine_problem
from rlsim.checks import judge
from rlsim.plugin.session import require
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario

SCENARIOS = Path(__file__).resolve().parents[2] / "scenarios"


def run_on_docker(name: str, tmp_path: Path) -> None:
    """Run ``scenarios/<name>.yaml`` on the docker backend; fail naming every unmet check."""
    require(engine_problem())
    outcome = run_scenario(load(SCENARIOS / f"{name}.yaml"), tmp_path / "out", backend="docker")
    failed = [f"{v.check}: {v.message}" for v in judge(outcome) if not v.ok]
    assert not failed, "\n".join(failed + [outcome.output[-3000:]])


