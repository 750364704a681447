"""The Ray matrix in the slow tier: rlsim's wheel on every Ray release of ci/ray_matrix.py's
default list (the oldest our users pin, the first with token auth, the newest...), each step
from a project outside the repository, and the newest again on Ray's plain path. The gate runs
the oldest release on a small set (test_user_project.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
ROOT = Path(__file__).parents[2]


def test_every_release_of_the_matrix_passes_every_step(tmp_path):
    out = subprocess.run([sys.executable, str(ROOT / "ci" / "ray_matrix.py"), "--plain",
                          "--out", str(tmp_path)], capture_output=True, text=True,
                         timeout=4 * 3600)
    assert out.returncode == 0, out.stdout[-20000:] + out.stderr[-5000:]
    assert "same verdicts as" in out.stdout and "| no:" not in out.stdout, out.stdout
