"""A trainer that refuses its config at start writes no event log: the runner records the refusal
from its output, so a scenario expecting that failure can judge it."""

import time
from types import SimpleNamespace

from rlsim import checks
from rlsim.history import Outcome
from rlsim.scenario.runner import config_refusal

REFUSAL = ("trainer: placement.roles.rollout=32-39 lies outside the run's 32 GPUs "
           "(4 nodes x 8): shrink the range")


def _outcome(returncode: int, output: str) -> Outcome:
    return Outcome(scenario=None, run_dir=None, started=time.time(), returncode=returncode,
                   output=output)


def test_a_refused_config_is_a_trainer_error_the_fails_check_reads():
    o = _outcome(2, "some warning\n" + REFUSAL + "\n")
    o.timeline.append({**config_refusal(o), "source": "trainer"})
    verdict = checks.fails(o, SimpleNamespace(pattern="rollout=32-39 lies outside", within_s=30))
    assert verdict.ok, verdict.message
    assert o.trainer("error")[0]["kind"] == "config_error"


def test_no_refusal_is_invented():
    assert config_refusal(_outcome(0, REFUSAL)) is None  # it completed
    assert config_refusal(_outcome(1, REFUSAL)) is None  # a crash, not a refusal
    assert config_refusal(_outcome(2, "Traceback ...\n")) is None  # said nothing of the kind
    logged = _outcome(2, REFUSAL)
    logged.timeline.append({"ts": 1.0, "source": "trainer", "type": "error", "kind": "x",
                            "message": "from the event log"})
    assert config_refusal(logged) is None  # the event log already has the error
