"""What a user does: build rlsim's wheel, install it into a fresh virtualenv, and in a project
folder outside the repository, beside a small Ray Train script of their own, run scenarios whose
paths are relative to their own folder, with ``rlsim run`` (default options) and with pytest.

The gate's virtualenv is a project that pins the oldest Ray rlsim claims (2.48.0, ROLL's pin): that
Ray of its own, rlsim from the wheel only, every other package from the test environment's
site-packages (a ``.pth`` line: no editable rlsim), as ci/ray_matrix.py makes each release's. The
slow tier installs the wheel with its dependencies resolved by pip (PyPI, and torch from the file
on disk).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration
ROOT = Path(__file__).parents[2]
sys.path.insert(0, str(ROOT / "ci"))
from ray_matrix import build_wheel, overlay_venv  # noqa: E402 - ci/ is not a package

OLDEST_RAY = "2.48.0"

TRAIN = '''
"""A Ray Train job of the user's own: two workers, DDP over gloo, no FailureConfig."""
import os, sys, tempfile, time
import ray.train, ray.train.torch, torch, torch.nn as nn
from ray.train import RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer


def loop(config):
    model = ray.train.torch.prepare_model(nn.Linear(4, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x = torch.randn(32, 4)
    for step in range(1, config["steps"] + 1):
        loss = nn.functional.mse_loss(model(x), x.sum(1, keepdim=True))
        opt.zero_grad(); loss.backward(); opt.step()
        time.sleep(0.2)
        ray.train.report({"step": step, "loss": loss.item()})


trainer = TorchTrainer(loop, train_loop_config={"steps": 6},
                       scaling_config=ScalingConfig(num_workers=2, use_gpu=False,
                                                    resources_per_worker={"MOCK_GPU": 1},
                                                    placement_strategy="STRICT_SPREAD"),
                       run_config=RunConfig(name="mine", storage_path=sys.argv[1]))
print("result:", trainer.fit().metrics, flush=True)
'''

SCENARIO = """# my job, told as a story
name: {name}
cluster: {{nodes: 2, gpus_per_node: 1}}
trainer:
  adapter: ray_train
  command: ["{{python}}", "train.py", "{{run_dir}}/results"]
  cwd: ..
  env: {{RAY_TRAIN_HEALTH_CHECK_INTERVAL_S: "0.5"}}
  total_steps: 6
{faults}expect:
  - completes: true
  - final_step: 6
  - no_leaks: true
"""
LOSE_NODE = "faults:\n  - at: {step: 3}\n    kill_node: {node: 1}\n"


def _venv(tmp: Path, full: bool) -> Path:
    """A fresh virtualenv with rlsim's wheel installed; its python. ``full``: pip resolves the
    dependencies itself (torch from the file on disk); else the oldest Ray rlsim claims and the
    test environment's other packages (ci/ray_matrix.py's venv, as the matrix makes them)."""
    wheel = build_wheel(tmp)
    venv = tmp / "venv"
    if not full:
        python = overlay_venv(venv, OLDEST_RAY, wheel)
    else:
        subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True,
                       timeout=120)
        python = venv / "bin" / "python"
        for step in (["-m", "ensurepip"],
                     ["-m", "pip", "install", "-q", "torch==2.13.0", f"{wheel}", "ray[train]",
                      "pytest"]):
            done = subprocess.run([str(python), *step], capture_output=True, text=True,
                                  timeout=1800, cwd=tmp)
            assert done.returncode == 0, done.stdout + done.stderr
    new_site = python.parents[1]
    where = subprocess.run([str(python), "-c", "import rlsim, trainer; print(rlsim.__file__); "
                            "print(trainer.__file__); from rlsim.scenario.jsonschema import "
                            "SHIPPED; print(SHIPPED)"], capture_output=True, text=True,
                           check=True, cwd=tmp).stdout.split()
    assert all(w.startswith(str(new_site)) for w in where), where  # the wheel's, not the repo's
    assert Path(where[2]).is_file(), "the wheel lacks the scenario files' JSON Schema"
    return python


def _project(tmp: Path) -> Path:
    project = tmp / "project"
    (project / "scenarios").mkdir(parents=True)
    (project / "train.py").write_text(TRAIN)
    (project / "scenarios" / "clean.yaml").write_text(SCENARIO.format(name="clean", faults=""))
    (project / "scenarios" / "node_lost.yaml").write_text(
        SCENARIO.format(name="node_lost", faults=LOSE_NODE))
    return project


def _env(python: Path) -> dict[str, str]:
    """A user's shell: none of the test session's settings; as root on a Ray without token auth,
    the opt-in to an unauthenticated cluster (checked to be needed by the oldest-Ray test)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "RLSIM_STRICT"))}
    ray = subprocess.run([str(python), "-c", "import importlib.metadata as m; "
                          "print(m.version('ray'))"], capture_output=True, text=True,
                         check=True).stdout.strip()
    if os.geteuid() == 0 and tuple(map(int, ray.split(".")[:2])) < (2, 52):
        env["RLSIM_ALLOW_UNAUTHENTICATED"] = "1"
    return env


def _story(python: Path, project: Path, clean: bool = True) -> dict[str, float]:
    """The user's Ray Train job: ``clean``, a fault-free `rlsim run` (default options); then
    the node lost, through pytest, failing in Ray Train's own words."""
    env = _env(python)
    t0 = time.monotonic()
    if clean:
        run = subprocess.run([str(python.parent / "rlsim"), "run", "scenarios/clean.yaml"],
                             cwd=project, env=env, capture_output=True, text=True, timeout=900)
        assert run.returncode == 0, run.stdout + run.stderr
        assert "PASS clean" in run.stdout and list(
            project.glob("reports/run-*/clean/run/results"))
        assert "no_leaks: nothing left behind" in run.stdout  # Ray Train's leftovers: a note
    first_pass = time.monotonic() - t0
    test = subprocess.run([str(python), "-m", "pytest", "scenarios/node_lost.yaml", "-q", "-p",
                           "no:cacheprovider"], cwd=project, env=env, capture_output=True,
                          text=True, timeout=900)
    out = test.stdout + test.stderr
    assert test.returncode == 1, out
    assert "scenario 'node_lost'" in out and "completes: the trainer did not complete" in out
    assert "Training failed due to worker errors" in out, out  # Ray Train's words, in the FAIL
    return {"first PASS (s)": first_pass}


def test_the_installed_wheel_runs_a_users_own_project_on_the_oldest_ray(tmp_path):
    """The gate's representative of the Ray matrix: a project pinning Ray 2.48.0 (no token auth,
    Ray Train V1 by default) runs its own Ray Train job and the README main job, from its own
    folder, with rlsim from the wheel."""
    python = _venv(tmp_path, full=False)
    project = _project(tmp_path)
    rlsim = str(python.parent / "rlsim")
    probe = subprocess.run([rlsim, "ray", "--json"], cwd=project, capture_output=True,
                           text=True, timeout=120)
    assert probe.returncode == 0, probe.stdout + probe.stderr
    seen = json.loads(probe.stdout)
    assert seen["version"] == OLDEST_RAY and seen["outside_range"] is None
    # every acceleration in force; token auth, and reading it again, are Ray 2.52's, and the
    # dashboard's forkserver 2.59's
    assert set(seen["plain"]) == {"token_auth", "auth_reread", "dashboard_forkserver"}, \
        seen["plain"]
    shutil.copy(ROOT / "scenarios" / "node_failure_mid_run.yaml", project / "scenarios")
    env = _env(python)
    if os.geteuid() == 0:  # no token auth: root is refused an open cluster unless it opts in
        refused = subprocess.run([rlsim, "run", "scenarios/node_failure_mid_run.yaml"],
                                 cwd=project, capture_output=True, text=True, timeout=120,
                                 env={k: v for k, v in env.items()
                                      if k != "RLSIM_ALLOW_UNAUTHENTICATED"})
        assert refused.returncode == 2, refused.stdout + refused.stderr
        assert "unauthenticated" in refused.stdout and "RLSIM_ALLOW_UNAUTHENTICATED=1" in \
            refused.stdout.replace("\n", "")
    main = subprocess.run([rlsim, "run", "scenarios/node_failure_mid_run.yaml"], cwd=project,
                          env=env, capture_output=True, text=True, timeout=900)
    assert main.returncode == 0, main.stdout + main.stderr
    timeline = next(project.glob("reports/run-*/node_failure_mid_run/timeline.jsonl"))
    ray = next(e for e in map(json.loads, timeline.read_text().splitlines())
               if e["type"] == "ray")
    assert ray["version"] == OLDEST_RAY and ray["auth"] == "none", ray
    assert {"forked_agents", "lean_agent", "worker_setup", "warm_workers"} <= \
        set(ray["in_force"]), ray["plain"]
    # the main job above was the fault-free `rlsim run` from this folder; the Ray Train job's
    # own clean run is the slow tier's (test_the_wheel_with_its_dependencies_resolved_by_pip)
    _story(python, project, clean=False)


@pytest.mark.slow
def test_the_wheel_with_its_dependencies_resolved_by_pip(tmp_path):
    t0 = time.monotonic()
    python = _venv(tmp_path, full=True)
    installed = time.monotonic() - t0
    figures = _story(python, _project(tmp_path))
    print(f"pip install of the wheel {installed:.0f} s; then the first PASS "
          f"{figures['first PASS (s)']:.0f} s")


@pytest.mark.slow
def test_the_catalogues_ray_train_story_from_the_repository_with_default_options():
    out = subprocess.run([str(Path(sys.executable).parent / "rlsim"), "run",
                          "scenarios/ray_train_node_lost.yaml"], cwd=ROOT, capture_output=True,
                         text=True, timeout=900)
    assert out.returncode == 0, out.stdout + out.stderr
