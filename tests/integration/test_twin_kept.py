"""The fault-free twin is trained once and kept under the rlsim home (rlsim.scenario.twins): a
second `rlsim run` of the same scenario, a new process, compares against the kept record without
training one (its timeline's baseline_done says cached). --fresh-twin: tests/unit/test_twins.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
RLSIM = Path(sys.executable).parent / "rlsim"

SCENARIO = """
name: twin_kept
cluster: {nodes: 2, gpus_per_node: 1}
trainer:
  config: grpo_tiny
  overrides: {save_freq: 4, total_steps: 6}
faults:
  - at: {step: 5}
    kill_role: {role: actor, rank: 1}
expect:
  - completes: {}
  - resumed_from_step: 4
  - matches_baseline: {}
"""


def _run(project: Path, home: Path, report: Path, *extra: str) -> dict:
    out = subprocess.run([str(RLSIM), "run", "s.yaml", "--report", str(report), *extra],
                         cwd=project, env={**os.environ, "RLSIM_HOME": str(home)},
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    timeline = (report / "twin_kept" / "timeline.jsonl").read_text().splitlines()
    [done] = [e for e in map(json.loads, timeline) if e["type"] == "baseline_done"]
    assert done["key"] in out.stdout  # the verdict names the twin it compared against
    return done


def test_a_twin_is_trained_once_and_reused_by_the_next_run(tmp_path):
    home = Path(tempfile.mkdtemp(prefix="rht-", dir="/tmp"))  # Ray's socket paths stay short
    try:
        project = tmp_path / "project"
        project.mkdir()
        (project / "s.yaml").write_text(SCENARIO)
        first = _run(project, home, tmp_path / "r1")
        assert first["cached"] is False and first.get("kept") is True
        second = _run(project, home, tmp_path / "r2")
        assert second["cached"] is True and second["key"] == first["key"]
        assert second["made"] == first["made"]
        assert Path(second["run_dir"]).parent == home / "twins"
    finally:
        shutil.rmtree(home, ignore_errors=True)
