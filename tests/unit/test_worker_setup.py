"""rlsim.ray_internals.worker_setup: what a raylet's worker start execs, and what it
leaves to Ray."""

import json
import os
import subprocess
import sys
from pathlib import Path

import rlsim.ray_internals.worker_setup as ws

WORKER = ["/ray/default_worker.py", "--node-ip-address=127.77.0.10", "--language=PYTHON"]


def test_no_runtime_env_execs_the_worker_without_the_options_meant_for_setup():
    command, env = ws.plan(["-s", *WORKER], {"A": "1"})
    assert command == [sys.executable, "-s", "/ray/default_worker.py",
                       "--node-ip-address=127.77.0.10"]
    assert env == {"A": "1"}


def test_env_vars_expand_as_rays_update_envs():
    context = {"env_vars": {"P": "${P}:/x", "Q": "$HOME-${NOPE}-$NOPE2", "R": "${P}"},
               "py_executable": sys.executable, "command_prefix": [], "java_jars": [],
               "override_worker_entrypoint": None}
    argv = [f"--serialized-runtime-env-context={json.dumps(context)}", *WORKER]
    _, env = ws.plan(argv, {"P": "/a", "HOME": "/h"})
    # later variables see earlier ones, as Ray sets them one by one in os.environ
    assert (env["P"], env["Q"], env["R"]) == ("/a:/x", "/h--$NOPE2", "/a:/x")
    assert ws.plan(["--serialized-runtime-env-context", json.dumps(context), *WORKER], {})


def test_what_only_ray_handles_goes_to_rays_script():
    def argv(**context):
        return [f"--serialized-runtime-env-context={json.dumps(context)}", *WORKER]
    assert ws.plan(argv(command_prefix=["conda", "activate", "x", "&&"]), {}) is None
    assert ws.plan(argv(py_executable="/opt/other/python"), {}) is None
    assert ws.plan(argv(override_worker_entrypoint="/in/container.py"), {}) is None
    assert ws.plan(argv(something_new=1), {}) is None
    assert ws.plan(["--serialized-runtime-env-context=not json", *WORKER], {}) is None
    assert ws.plan([*WORKER[:-1], "--language=JAVA"], {}) is None


def test_rays_own_script_is_where_the_fallback_looks(tmp_path: Path):
    import ray
    own = Path(ray.__file__).parent.parent / ws.RAYS_OWN
    assert own.is_file()
    # the fallback runs Ray's script with the same arguments: --help shows it is Ray's parser
    out = subprocess.run([sys.executable, str(Path(ws.__file__)), "--help", "--language=JAVA"],
                         capture_output=True, text=True, env={**os.environ}, timeout=60)
    assert "Set up the environment for a Ray worker" in out.stdout
