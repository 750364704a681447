"""A GCS that takes connections but never answers: every front end that is about to hand an
address to Ray's own connect answers in seconds with one line naming the address and what the
GCS did not do (`rlsim status`, `rlsim down` and `rlsim doctor` of a detached substrate cluster
there, `rlsim run --backend real`, `rlsim plan --ray-address`, the launchers' wait), where they
waited past 60 s in Ray's own connect. The GCS is a loopback listener this test opens: it
accepts and says nothing, or greets like gRPC (an HTTP/2 SETTINGS frame) and then answers no
request. A hang fails at the subprocess's 30 s bound; no wall time is asserted."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from pathlib import Path

import loopback
import pytest

from rlsim.host import state
from rlsim.host.spec import ClusterSpec
from rlsim.ray_internals import gcs

RLSIM = str(Path(sys.executable).parent / "rlsim")
ANSWERS = pytest.mark.parametrize("answer", [None, loopback.SETTINGS_FRAME],
                                  ids=["silent", "greets-then-silent"])


@contextlib.contextmanager
def _silent_gcs(answer: bytes | None):
    """A loopback GCS that never answers (:mod:`loopback`); yields its ``127.0.0.1:PORT``."""
    with loopback.listener(answer) as (port, _):
        yield f"127.0.0.1:{port}"


def _detached_state(home: Path, on: str) -> None:
    """A detached cluster spread over the substrate at ``on``, as `rlsim cluster --on --detach`
    leaves its state."""
    os.environ["RLSIM_HOME"] = str(home)
    try:
        state.save(state.ClusterState(
            spec=ClusterSpec(name="away"), slot=0, session="away-0123abcd",
            backend="substrate", owner_pid=os.getpid(), detached=True, on=on,
            machines=["127.0.0.1"]))
    finally:
        del os.environ["RLSIM_HOME"]


def _rlsim(home: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([RLSIM, *args], capture_output=True, text=True, timeout=30,
                          env={**os.environ, "RLSIM_HOME": str(home)})


@ANSWERS
def test_no_answer_names_what_the_gcs_did_not_do(answer):
    with _silent_gcs(answer) as on:
        host, port = on.split(":")
        found = gcs.no_answer(host, int(port), timeout_s=0.5)
    assert found in ("no answer within 0.5 s",
                     "it took the connection but answered no request within 0.5 s")
    assert found.startswith("no answer") == (answer is None)


@ANSWERS
def test_status_names_a_silent_substrate_and_returns(tmp_path, answer):
    with _silent_gcs(answer) as on:
        _detached_state(tmp_path, on)
        shown = _rlsim(tmp_path, "status", "--json")
        plain = _rlsim(tmp_path, "status")
    assert shown.returncode == 0, shown.stderr
    [row] = json.loads(shown.stdout)
    assert f"--on {on}: nothing answers there as a Ray GCS (" in row["note"], row
    assert plain.returncode == 0 and "Traceback" not in plain.stderr, plain.stderr
    line = " ".join(plain.stdout.split())
    assert line.startswith(f"away: cluster 'away': --on {on}: nothing answers there"), line
    assert "fix:" in line


@ANSWERS
def test_down_keeps_the_state_of_a_silent_substrate_and_says_so(tmp_path, answer):
    with _silent_gcs(answer) as on:
        _detached_state(tmp_path, on)
        out = _rlsim(tmp_path, "down", "away")
    assert out.returncode == 1, out.stdout + out.stderr
    said = " ".join((out.stdout + out.stderr).split())
    assert f"--on {on}: nothing answers there" in said and "its state is kept" in said, said
    assert (tmp_path / "clusters" / "away.json").exists()


@ANSWERS
def test_doctor_of_a_cluster_on_a_silent_substrate_says_so_in_one_line(tmp_path, answer):
    """It waited in Ray's own connect (the greeting server), or, once the substrate was asked
    first, ended in a LookupError's traceback."""
    with _silent_gcs(answer) as on:
        _detached_state(tmp_path, on)
        out = _rlsim(tmp_path, "doctor", "away")
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith(f"rlsim doctor: cluster 'away': --on {on}: nothing answers "
                                 "there"), out.stderr
    assert "Traceback" not in out.stderr and out.stderr.count("\n") == 1, out.stderr


# what gcs.no_answer says of each listener (3 s: the front ends' own bound; the wait's is 2 s)
NOT_DONE = {None: "no answer within {t} s",
            loopback.SETTINGS_FRAME: "it took the connection but answered no request within {t} s"}


def _said(out: subprocess.CompletedProcess) -> str:
    return " ".join((out.stdout + out.stderr).split())


@ANSWERS
def test_backend_real_names_a_silent_gcs_before_joining(tmp_path, answer):
    """It heard the greeting and then waited in Ray's own connect (greets-then-silent)."""
    with _silent_gcs(answer) as at:
        out = _rlsim(tmp_path, "run", "scenarios/too_few_gpus.yaml", "--backend", "real",
                     "--ray-address", at, "--report", str(tmp_path / "report"))
    assert out.returncode == 2, out.stdout + out.stderr
    said = _said(out)
    assert f"--backend real: no Ray cluster answers at {at} ({NOT_DONE[answer].format(t=3)})" \
        in said and "fix:" in said, said
    assert "Traceback" not in said


@ANSWERS
def test_plan_names_a_silent_gcs_before_reading_it(tmp_path, answer):
    """It heard the greeting and then waited in Ray's reader of the GCS (greets-then-silent)."""
    with _silent_gcs(answer) as at:
        out = _rlsim(tmp_path, "plan", "openrlhf", "--ray-address", at, "--",
                     "python3", "-m", "openrlhf.cli.train_ppo_ray")
    assert out.returncode == 2, out.stdout + out.stderr
    said = _said(out)
    assert said.startswith(f"rlsim plan: no Ray cluster answers at {at} "
                           f"({NOT_DONE[answer].format(t=3)}); fix:"), said


@ANSWERS
def test_the_launchers_wait_names_a_silent_gcs_and_gives_up_at_its_bound(tmp_path, answer):
    """It heard the greeting and then waited in ``ray.init`` past its own --timeout
    (greets-then-silent)."""
    with _silent_gcs(answer) as at:
        out = subprocess.run([sys.executable, "-m", "rlsim.launch.wait", "--address", at,
                              "--nodes", "1", "--timeout", "1"], capture_output=True,
                             text=True, timeout=30, env={**os.environ,
                                                         "RLSIM_HOME": str(tmp_path)})
    assert out.returncode == 1, out.stdout + out.stderr
    line = f"no Ray head answers at {at} yet ({NOT_DONE[answer].format(t=2)})"
    assert f"rlsim wait: {line}" in out.stdout, out.stdout
    assert out.stderr.startswith(f"rlsim wait: gave up after 1 s: {line}. Fix:"), out.stderr
