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


def test_a_kept_cluster_handed_to_a_scenario_whose_fault_cannot_be_built_is_not_lost(
        tmp_path, monkeypatch):
    """The pool hands a running cluster to the next scenario of its shape; a fault of that
    scenario whose constructor raises (a plugin's) ended the scenario before its finally, and the
    cluster, in neither the pool nor the scenario's hands, ran on until the machine's next
    reap. It is given back now: here a cluster no one can vouch for, so it is stopped."""
    import pytest

    from rlsim.faults import FAULTS
    from rlsim.scenario.loader import load
    from rlsim.scenario.pool import Pool, shape_key
    from rlsim.scenario.runner import make_cluster, play

    class Unbuildable:
        def __init__(self, params, ctx):
            raise RuntimeError("needs a licence server")

    (tmp_path / "s.yaml").write_text(
        "name: s\ncluster: {nodes: 2, gpus_per_node: 1}\n"
        "trainer: {adapter: events, command: [python, -c, pass]}\n"
        "faults:\n  - at: {step: 1}\n    kill_node: {node: 1}\n"
        "expect: [{completes: true}]\n")
    sc = load(tmp_path / "s.yaml")
    monkeypatch.setitem(FAULTS, "kill_node", type("Unbuildable", (Unbuildable,
                                                                  FAULTS["kill_node"]), {}))

    class Kept:  # the pool's idle cluster, as far as give_back looks at it
        state = None
        stopped = False

        def __init__(self, spec):
            self.spec = spec

        def stop(self):
            self.stopped = True

        def leaks(self):
            return []

    pool = Pool()
    fresh = make_cluster(sc, "local", None, tmp_path / "out")
    kept = Kept(fresh.spec)
    pool.idle[shape_key(fresh.spec, "local")] = kept
    with pytest.raises(RuntimeError, match="licence server"):
        play(sc, tmp_path / "out", pool=pool)
    assert kept.stopped and not pool.idle
