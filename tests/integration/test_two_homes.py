"""Many jobs and users on one machine: two rlsim homes (two users, two CI jobs) each run a cluster
and a scenario at once, and neither reaches the other's. Before slots were claimed machine-wide,
both homes picked slot 0: with a second home's detached cluster up, the README's main job failed
in 2 s ("node 0 failed to start"), once with "Session name ... does not match persisted value"
(its head had reached the other home's GCS)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from rlsim.host import slots

pytestmark = pytest.mark.integration
RLSIM = Path(sys.executable).parent / "rlsim"

TRAIN = """
from rlsim.events import EventLog

log = EventLog()
for step in range(1, 4):
    log.emit("step_end", step=step, metrics={})
log.emit("run_end", status="completed", step=3)
"""
SCENARIO = """
name: beside_another_home
cluster: {nodes: 2, gpus_per_node: 1}
trainer: {adapter: events, command: ["{python}", "train.py"], total_steps: 3}
expect: [{completes: true}, {final_step: 3}, {no_leaks: true}]
"""


@pytest.fixture
def homes():
    """Short rlsim homes (Ray's unix socket paths under a home must stay within 107 bytes, too
    few for pytest's tmp_path), removed after the test."""
    made: list[Path] = []

    def home(tag: str) -> Path:
        made.append(Path(tempfile.mkdtemp(prefix=f"rh{tag}-", dir="/tmp")))
        return made[-1]

    yield home
    for path in made:
        shutil.rmtree(path, ignore_errors=True)


def rlsim(home: Path, *args: str, cwd: Path | None = None,
          timeout: float = 300) -> subprocess.CompletedProcess:
    return subprocess.run([str(RLSIM), *args], env={**os.environ, "RLSIM_HOME": str(home)},
                          cwd=cwd, capture_output=True, text=True, timeout=timeout)


def status(home: Path) -> list[dict]:
    out = rlsim(home, "status", "--json")
    assert out.returncode == 0, out.stdout + out.stderr
    return json.loads(out.stdout)


def test_two_homes_clusters_and_scenarios_side_by_side(tmp_path, homes):
    other, mine = homes("o"), homes("m")
    up = rlsim(other, "cluster", "--nodes", "2", "--fake-gpus", "1", "--name", "theirs",
               "--detach")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        [theirs] = status(other)
        # a claim any user's rlsim sees, and listeners in its slot
        with slots.lock():
            assert theirs["slot"] in slots.busy(), slots.busy()
        # this home: a cluster of its own, and a scenario, while the other home's runs
        ours = rlsim(mine, "cluster", "--nodes", "2", "--fake-gpus", "1", "--name",
                     "theirs", "--detach")  # the same name: names are per home
        assert ours.returncode == 0, ours.stdout + ours.stderr
        [mine_st] = status(mine)
        assert mine_st["slot"] != theirs["slot"]
        project = tmp_path / "project"
        project.mkdir()
        (project / "train.py").write_text(TRAIN)
        (project / "s.yaml").write_text(SCENARIO)
        run = rlsim(mine, "run", "s.yaml", "--report", str(tmp_path / "report"), cwd=project)
        assert run.returncode == 0, run.stdout + run.stderr
        timeline = (tmp_path / "report" / "beside_another_home" / "timeline.jsonl").read_text()
        ready = next(json.loads(line) for line in timeline.splitlines()
                     if '"cluster_ready"' in line)
        used = {addr.split(".")[2] for addr in ready["nodes"]}
        assert str(theirs["slot"]) not in used and str(mine_st["slot"]) not in used, ready
        # the other home's cluster is untouched: both its nodes alive, its GCS its own
        [after] = status(other)
        assert after["session"] == theirs["session"]
        assert all(n["alive"] for n in after["nodes"]), after
    finally:
        for home in (mine, other):
            down = rlsim(home, "down", "--all")
            assert down.returncode == 0, down.stdout + down.stderr
    with slots.lock():  # both claims gone with their clusters
        held = slots.busy()
    assert not any(theirs["session"] in h.what for h in held.values()), held


def _project(root: Path, names: list[str]) -> Path:
    (root / "scenarios").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "pytest.ini").write_text("[pytest]\nrlsim_scenarios = scenarios/*.yaml\n")
    for name in names:
        (root / "scenarios" / f"{name}.yaml").write_text(
            SCENARIO.replace("beside_another_home", name).replace(
                '"train.py"', '"../train.py"'))
    return root


@pytest.mark.slow
def test_two_projects_pytest_n2_at_once(tmp_path, homes):
    """Two projects' suites, each `pytest -n 2` with a home of its own, at the same time: four
    clusters at once, every one in a slot of its own."""
    runs = []
    for p in ("a", "b"):
        root = _project(tmp_path / p, [f"{p}_one", f"{p}_two"])
        runs.append(subprocess.Popen(
            [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2",
             "--no-reuse", "scenarios"], cwd=root,
            env={**os.environ, "RLSIM_HOME": str(homes(p))},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    outs = [r.communicate(timeout=900)[0] for r in runs]
    for r, out in zip(runs, outs, strict=True):
        assert r.returncode == 0 and "2 passed" in out, out[-3000:]


def _runs_as(user: str) -> bool:
    return shutil.which("runuser") is not None and subprocess.run(
        ["runuser", "-u", user, "--", sys.executable, "-c", "import rlsim"],
        capture_output=True, timeout=60).returncode == 0


@pytest.mark.slow
def test_an_unprivileged_users_scenario_beside_roots(tmp_path, homes):
    if os.geteuid() != 0 or not _runs_as("nobody"):
        pytest.skip("this machine does not let an unprivileged user (nobody) run this Python "
                    "and rlsim (its interpreter or packages are not readable to them)")
    root_home = homes("r")
    up = rlsim(root_home, "cluster", "--nodes", "2", "--fake-gpus", "1", "--detach")
    try:
        assert up.returncode == 0, up.stdout + up.stderr
        project = tmp_path / "nobody-project"
        project.mkdir()
        (project / "train.py").write_text(TRAIN)
        (project / "s.yaml").write_text(SCENARIO)
        os.chmod(tmp_path, 0o755)
        shutil.chown(project, "nobody")
        run = subprocess.run(["runuser", "-u", "nobody", "--", str(RLSIM), "run", "s.yaml",
                              "--report", str(project / "report")], cwd=project,
                             capture_output=True, text=True, timeout=600,
                             env={k: v for k, v in os.environ.items() if k != "RLSIM_HOME"})
        assert run.returncode == 0, run.stdout + run.stderr
    finally:
        rlsim(root_home, "down", "--all")
