"""neighbour_job's parts that are data: its parameters, and what it reads of ``ray stop``'s
output (lines as Ray 2.60 prints them, colours and all, from a run here)."""

from __future__ import annotations

import os
import pwd

import pytest
from pydantic import ValidationError

from rlsim.faults.neighbour_job import _ANSI, NeighbourJob, ray_stop_said

# ray stop --force run as nobody beside root's cluster: one of its own stopped, root's refused
# (each refused line once per pattern the process matched)
SAID = (
    "2026-11-29 12:07:22,673\tERR scripts.py:1434 -- \x1b[31mCould not terminate `\x1b[1m"
    "/usr/bin/raylet --node_ip_address=127.77.0.10\x1b[22m\x1b[26m` due to (pid=26675, "
    "name='raylet')\x1b[39m\n"
    "2026-11-29 12:07:22,674\tERR scripts.py:1434 -- Could not terminate `python3 -m x` due "
    "to (pid=26674)\n"
    "2026-11-29 12:07:22,675\tERR scripts.py:1434 -- Could not terminate `/usr/bin/raylet` "
    "due to (pid=26675, name='raylet')\n"
    "2026-11-29 12:07:22,680\tINFO scripts.py:1493 -- Stopped all 6 Ray processes.\n")


def test_what_ray_stop_stopped_and_each_process_it_could_not_once():
    stopped, refused = ray_stop_said(_ANSI.sub("", SAID))
    assert stopped == 6
    assert refused == [{"pid": 26675, "name": "raylet"}, {"pid": 26674, "name": ""}]


@pytest.mark.parametrize(("said", "stopped"), [
    ("INFO scripts.py:1493 -- Did not find any active Ray processes.", 0),
    ("WARN -- Stopped only 4 out of 7 Ray processes within the grace period 30 seconds.", 4),
])
def test_a_ray_stop_that_stopped_none_or_some(said, stopped):
    assert ray_stop_said(said) == (stopped, [])


def test_the_user_running_rlsim_is_refused_naming_why():
    me = pwd.getpwuid(os.geteuid()).pw_name
    with pytest.raises(ValidationError, match="every Ray cluster of that user"):
        NeighbourJob.Params.model_validate({"user": me})


def test_a_user_this_machine_lacks_is_refused_naming_the_fix():
    with pytest.raises(ValidationError, match="useradd rlsim-no-such-user"):
        NeighbourJob.Params.model_validate({"user": "rlsim-no-such-user"})


def test_its_user_is_nobody_unless_said():
    if os.geteuid() == pwd.getpwnam("nobody").pw_uid:
        pytest.skip("this test runs as nobody")
    assert NeighbourJob.Params.model_validate({}).user == "nobody"
