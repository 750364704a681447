"""A substrate whose GCS takes connections but never answers: `rlsim status` (and `rlsim down`)
of a detached cluster there answer in seconds with one line naming the address, where they
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

from rlsim.backends.ray_internals import gcs
from rlsim.host import state
from rlsim.host.spec import ClusterSpec

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
