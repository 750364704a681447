"""The one session rlsim run and the pytest plugin share (rlsim.scenario.session): the backend,
the slow tier and the refusals are decided there, in the order that keeps a real cluster safe."""

from __future__ import annotations

from pathlib import Path

from rlsim.scenario.loader import load
from rlsim.scenario.session import Session

CATALOGUE = Path(__file__).resolve().parents[2] / "scenarios"


def _sc(name: str):
    return load(CATALOGUE / f"{name}.yaml")


def test_the_backend_is_the_front_ends_choice_else_the_scenarios_own():
    sc = _sc("node_failure_mid_run")
    assert Session().backend_of(sc) == sc.cluster.backend == "local"
    assert Session(backend="real").backend_of(sc) == "real"


def test_the_slow_tier_is_left_out_unless_asked_for_or_named():
    slow, quick = _sc("degraded_link"), _sc("node_failure_mid_run")
    assert slow.slow and not quick.slow
    assert Session().skips_slow(slow) and not Session().skips_slow(quick)
    assert not Session(slow=True).skips_slow(slow)
    assert not Session().skips_slow(slow, named=True)


def test_disruptive_faults_are_refused_on_a_foreign_cluster_alone_and_in_the_front_ends_words():
    kill, clean = _sc("node_failure_mid_run"), _sc("actor_killed_by_class")
    assert Session().disruptive([kill, clean]) == {}  # rlsim's own clusters: its to harm
    refused = Session(backend="real").disruptive_refusal([kill], "run the others")
    assert refused.startswith("refused: on a real cluster") and "node_failure_mid_run " \
        "(kill_node)" in refused and refused.endswith("or run the others")
    assert Session(backend="real", allow_disruptive=True).disruptive([kill]) == {}


def test_no_protection_asked_of_a_run_that_starts_no_cluster(monkeypatch):
    import rlsim.ray_internals as ri

    asked = []
    monkeypatch.setattr(ri, "auth_refusal", lambda: asked.append(1) or "unprotected")
    sc = _sc("node_failure_mid_run")
    assert Session(backend="real").auth_refusal([sc]) is None and asked == []
    session = Session()
    assert session.auth_refusal([sc]) == "unprotected"
    assert session.auth_refusal([sc]) == "unprotected" and asked == [1]  # asked once a run


def test_a_foreign_backend_without_an_address_is_said_before_anything_connects(monkeypatch):
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    sc = _sc("node_failure_mid_run")
    assert Session().address_problem([sc]) is None  # a cluster of its own: no address needed
    said = Session(backend="real").address_problem([sc])
    assert said.startswith("--backend real needs the cluster's address") and "--ray-address" \
        in said
    assert "HOST:PORT" in Session(backend="real", ray_address="nohost").address_problem([sc])
