"""Property-based fuzzing of two surfaces of a scenario (as ``test_fuzz_new_surfaces`` fuzzes the
others): a substrate's address (``cluster.on``, ``rlsim cluster --on``) and groups of nodes (a
partition's, a link's ends: indices, roles, role:rank). The property, for each: taken, and then
usable as what it says (an address a socket can be given; groups that cannot share a node by
their text), or refused with one message naming the field and the fix; never a traceback.

Bounded for the gate (the ``rlsim-gate`` profile); ``--rlsim-slow`` runs ``rlsim-slow``."""

from __future__ import annotations

import tempfile
from datetime import timedelta
from pathlib import Path

import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from rlsim.reach import parse_address, substrate_problem
from rlsim.scenario.loader import ScenarioError, read

FUZZ = settings(deadline=timedelta(seconds=10), suppress_health_check=[
    HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
TRAINER = {"config": "grpo_tiny", "overrides": {"total_steps": 12, "save_freq": 4}}

HOSTS = st.one_of(st.sampled_from(["10.0.0.1", "head", "head.local", "a.", "...", "a..b", "",
                                   "-", "_", "x" * 64, "x" * 63, "[::1]", "[zz]", "é", "a b",
                                   "127.0.0.1", "localhost", "h\n", "\x1b[2K"]),
                  st.text(max_size=12))
PORTS = st.one_of(st.sampled_from(["6379", "0", "1", "65535", "65536", "99999", "", "-1",
                                   "00001", "6379 ", "6379\n", "٣", "٣٣"]), st.text(max_size=6))
ADDRESSES = st.one_of(st.builds(lambda h, p: f"{h}:{p}", HOSTS, PORTS), st.text(max_size=20))


def _scenario(cluster: dict, faults: list | None = None) -> str:
    doc = {"name": "s", "cluster": cluster, "trainer": TRAINER,
           **({"faults": faults} if faults else {}), "expect": [{"completes": True}]}
    return yaml.safe_dump(doc, default_flow_style=False, width=10**6)


def _read(text: str):
    """The scenario, or None when refused in one message naming the file and a field."""
    try:
        return read(text, Path(tempfile.gettempdir()) / "fuzz.yaml")
    except ScenarioError as e:
        said = str(e)
        assert said.startswith(str(Path(tempfile.gettempdir()) / "fuzz.yaml")), said
        assert "Traceback" not in said and "constrained-" not in said, said
        assert "not valid YAML" not in said, said  # the fuzzer's own document: always YAML
        return None


@FUZZ
@given(ADDRESSES, st.sampled_from(["local", "docker", None]))
def test_cluster_on(address, backend):
    cluster = {"nodes": 2, "on": address, **({"backend": backend} if backend else {})}
    sc = _read(_scenario(cluster))
    if sc is None:
        return
    assert backend in (None, "local"), "a substrate with another backend was taken"
    host, port = parse_address(sc.cluster.on, "cluster.on")  # what the substrate will connect to
    assert 1 <= port <= 65535 and host and ".." not in host and not host.startswith("[")
    assert sc.cluster.on.rpartition(":")[0] == host  # as the substrate's own split reads it


@FUZZ
@given(ADDRESSES)
def test_cluster_on_by_hand(address):
    """What ``rlsim cluster --on`` asks before anything: a problem in words, or an address whose
    host and port a socket takes."""
    found = substrate_problem(address)
    if found is None:
        host, port = parse_address(address)
        head, _, tail = address.rpartition(":")  # as the substrate's own connection splits it
        assert head == host and tail.isascii() and tail.isdigit() and int(tail) == port
        assert all(0 < len(label) <= 63 for label in host.removesuffix(".").split("."))
    else:
        assert found.startswith(repr(address[:200])) and found.isprintable(), found


NAMED = st.sampled_from([1, 2, 3, "actor", "rollout", "actor:0", "actor:1", "rollout:1"])
ENTRIES = st.one_of(NAMED, st.integers(-2, 5), st.sampled_from(
    ["ref", "actor:01", "rollout:0", "actor:", "actor:x", "actor:1.5", "Actor", "1", "", ":1",
     "random", "actor:99999"]), st.booleans(), st.none(),
    st.floats(allow_nan=False, allow_infinity=False))
# mostly groups a user would write (which may overlap), then anything
GROUPS = st.one_of(st.lists(st.lists(NAMED, min_size=1, max_size=2), min_size=2, max_size=3),
                   st.lists(st.lists(ENTRIES, max_size=3), max_size=3), ENTRIES)


def _names(entry) -> tuple:
    """What an entry names, by its text: (role, None) for a whole role, (role, rank), or an
    index."""
    if isinstance(entry, int):
        return (None, entry)
    role, _, rank = entry.partition(":")
    return (role, int(rank) if rank else None)


@FUZZ
@given(st.sampled_from(["partition", "flap_link"]), GROUPS)
def test_groups(kind, groups):
    extra = {"period_s": 2, "down_s": 1} if kind == "flap_link" else {}
    sc = _read(_scenario({"nodes": 6}, [{"at": {"step": 3}, kind: {"groups": groups, **extra}}]))
    if sc is None:
        return
    taken = sc.faults[0].params.groups
    named = [[_names(e) for e in g] for g in taken]
    for i, group in enumerate(named):
        for other in named[i + 1:]:
            for role, rank in group:
                assert (role, rank) not in other, taken
                if role is not None:  # a role whole on one side, one of its ranks on the other
                    assert not any(r == role and (rank is None or k is None) for r, k in other), \
                        taken
