"""A verl-shaped run that resumes at an epoch boundary, trains nothing and exits 0 (verl#7401) is
failed on final_step, and on nothing that a clean exit satisfies. The real verl 0.9.1 at the same
boundary trains the remaining steps: scenarios/verl_real_epoch_boundary_resume.yaml (slow tier)."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlsim.checks import judge
from rlsim.scenario.loader import load
from rlsim.scenario.runner import run_scenario

pytestmark = pytest.mark.integration

SCENARIO = (Path(__file__).resolve().parents[1] / "fixtures" / "verl"
            / "epoch_boundary_trains_nothing.yaml")


def test_a_resume_at_an_epoch_boundary_that_trains_nothing_fails_on_final_step(tmp_path):
    outcome = run_scenario(load(SCENARIO), tmp_path / "out")
    verdicts = {v.check: v for v in judge(outcome)}
    failed = sorted(name for name, v in verdicts.items() if not v.ok)
    assert failed == ["final_step"], [(v.check, v.message) for v in verdicts.values()]
    # the first launch got past step 5 (a step or so more while the kill lands), the relaunch
    # trained none
    assert 5 <= verdicts["final_step"].value < 8
    assert not [e for e in outcome.trainer("step_end") if e["attempt"] == 1]
    assert outcome.returncode == 0
