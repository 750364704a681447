"""A package of the user's own adds an adapter and a check by entry point, installed into its own
folder (pip --target) and found by rlsim without editing it; a name two packages register is
refused naming both. The plugin's scenario runs for real, on a one-node local cluster."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

PLUGINS = Path(__file__).parents[1] / "fixtures" / "plugin"
RLSIM = Path(sys.executable).parent / "rlsim"

SCRIPT = """
import sys
from rlsim.events import EventLog

log = EventLog()
for step in range(1, 4):
    log.emit("step_end", step=step, metrics={})
log.emit("run_end", status="completed", step=3)
"""

SCENARIO = """
name: with_plugins
cluster: {nodes: 1, gpus_per_node: 0}
trainer: {adapter: script, command: ["{python}", "train.py"]}
expect:
  - completes: true
  - steps_at_least: 3
"""


def install(name: str, into: Path) -> None:
    """pip install the distribution into ``into``, built from a copy (a build writes beside its
    sources)."""
    source = into.parent / f"{name}-source"
    shutil.copytree(PLUGINS / name, source)
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps",
                    "--no-build-isolation", "--target", str(into), str(source)],
                   check=True, capture_output=True, timeout=300)


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    """A folder holding the installed plugin distribution (as a venv's site-packages would)."""
    where = tmp_path_factory.mktemp("site")
    install("rlsim_steps", where)
    return where


def rlsim(*args: str, site: Path, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(site)}
    return subprocess.run([str(RLSIM), *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=300)


@pytest.mark.integration
def test_a_plugins_adapter_and_check_run_a_scenario(site, tmp_path):
    (tmp_path / "train.py").write_text(SCRIPT)
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    out = rlsim("validate", "scenario.yaml", site=site, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    out = rlsim("run", "scenario.yaml", site=site, cwd=tmp_path)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "steps_at_least: 3 step(s), expected at least 3" in out.stdout
    bad = tmp_path / "bad.yaml"
    bad.write_text(SCENARIO.replace("steps_at_least: 3", "steps_at_least: none"))
    out = rlsim("validate", "bad.yaml", site=site, cwd=tmp_path)
    assert out.returncode == 2 and "expect[1].steps_at_least.steps" in out.stdout, out.stdout


def test_without_the_plugin_its_names_are_unknown(tmp_path):
    (tmp_path / "scenario.yaml").write_text(SCENARIO)
    (tmp_path / "train.py").write_text(SCRIPT)
    out = subprocess.run([str(RLSIM), "validate", "scenario.yaml"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "unknown adapter 'script'" in out.stdout, out.stdout


def test_a_name_two_packages_register_is_refused_naming_both(site, tmp_path):
    clash = tmp_path / "clash-site"
    install("clash", clash)
    env_site = Path(f"{site}{os.pathsep}{clash}")
    (tmp_path / "scenario.yaml").write_text("name: s\ntrainer: {config: grpo_tiny}\n"
                                            "expect: [{completes: true}]\n")
    out = rlsim("validate", "scenario.yaml", site=env_site, cwd=tmp_path)
    said = " ".join((out.stdout + out.stderr).split())
    assert out.returncode == 2, said
    assert "check 'completes' is registered by two packages" in said and "clash" in said \
        and "rlsim" in said and "Traceback" not in said, said
