"""neighbour_job's parts that are data: its parameters, the user it picks or refuses, and what
it reads of ``ray stop``'s output (:mod:`rlsim.ray_internals.stop`; lines as Ray 2.60 prints
them, colours and all, from a run here)."""

from __future__ import annotations

import os
import pwd
import random
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from rlsim.faults.neighbour_job import OWN_UIDS, NeighbourJob
from rlsim.ray_internals import stop

# ray stop --force run as another user beside root's cluster: its own stopped, root's refused
# (each refused line once per pattern the process matched)
SAID = (
    "2026-11-29 12:07:22,673\tERR scripts.py:1434 -- \x1b[31mCould not terminate `\x1b[1m"
    "/usr/bin/raylet --node_ip_address=127.77.0.10\x1b[22m\x1b[26m` due to (pid=26675, "
    "name='raylet')\x1b[39m\n"
    "2026-11-29 12:07:22,674\tERR scripts.py:1434 -- Could not terminate `python3 -m x` due "
    "to (pid=26674)\n"
    "2026-11-29 12:07:22,675\tERR scripts.py:1434 -- Could not terminate `/usr/bin/raylet` "
    "due to (pid=26675, name='raylet')\n"
    "2026-11-29 12:07:22,676\tERR scripts.py:1434 -- Could not terminate `x` due to psutil "
    "said no\n"
    "2026-11-29 12:07:22,680\tINFO scripts.py:1493 -- \x1b[32mStopped all 6 Ray processes."
    "\x1b[39m\n")


def test_what_ray_stop_stopped_each_process_it_could_not_once_and_what_it_could_not_read():
    assert stop.said(SAID) == {"stopped": 6, "refused": [{"pid": 26675, "name": "raylet"},
                                                         {"pid": 26674, "name": ""}],
                               "unread": 1}


@pytest.mark.parametrize(("said", "stopped"), [
    ("INFO scripts.py:1493 -- Did not find any active Ray processes.", 0),
    ("WARN -- Stopped only 4 out of 7 Ray processes within the grace period 30 seconds.", 4),
])
def test_a_ray_stop_that_stopped_none_or_some(said, stopped):
    assert stop.said(said) == {"stopped": stopped, "refused": [], "unread": 0}


def fault(user: str | None) -> NeighbourJob:
    params = NeighbourJob.Params.model_validate({} if user is None else {"user": user})
    return NeighbourJob(params, None)


def test_unnamed_it_takes_a_user_id_no_account_or_process_has(monkeypatch):
    monkeypatch.setattr(random, "SystemRandom", lambda: random.Random(7))
    uid, who = fault(None)._user()
    assert uid in OWN_UIDS and who == f"uid {uid}"
    assert uid not in {u.pw_uid for u in pwd.getpwall()}
    assert all(os.stat(p).st_uid != uid for p in Path("/proc").iterdir() if p.name.isdigit())


def test_the_user_running_rlsim_is_refused_naming_why():
    me = pwd.getpwuid(os.geteuid()).pw_name
    with pytest.raises(ValueError, match="every Ray cluster of that user"):
        fault(me)._user()


def test_a_user_this_machine_lacks_is_refused_naming_the_fix():
    with pytest.raises(ValueError, match="useradd rlsim-no-such-user"):
        fault("rlsim-no-such-user")._user()


def test_a_user_that_runs_something_here_is_refused():
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("starting a process as another user needs root and setpriv")
    nobody = pwd.getpwnam("nobody").pw_uid
    sleeper = subprocess.Popen(["setpriv", f"--reuid={nobody}", f"--regid={nobody}",
                                "--clear-groups", "sleep", "30"])
    try:
        deadline = time.monotonic() + 5
        while os.stat(f"/proc/{sleeper.pid}").st_uid != nobody:  # until setpriv has switched
            assert time.monotonic() < deadline
            time.sleep(0.01)
        with pytest.raises(ValueError, match="runs processes here"):
            fault("nobody")._user()
    finally:
        sleeper.kill()
        sleeper.wait()


@pytest.mark.parametrize("user", ["", "Root", "a b", "../x"])
def test_a_name_no_user_can_have_is_refused(user):
    with pytest.raises(ValidationError, match="user"):
        NeighbourJob.Params.model_validate({"user": user})
