"""Docker objects carry this home's id; the reaper takes only its own home's leftovers."""
from rlsim.backends.docker_engine import HOME_LABEL, LABEL, is_orphan, labels, network_name
from rlsim.host.home import home_id


def test_every_object_is_labelled_with_session_and_home():
    assert labels("s1", **{"rlsim.node": "0"}) == {LABEL: "s1", HOME_LABEL: home_id(),
                                                   "rlsim.node": "0"}


def test_network_names_differ_between_homes():
    assert network_name(3, home="0123abcd") == "rlsim-0123abcd-slot3"
    assert network_name(3, home="0123abcd") != network_name(3, home="ffffffff")
    assert network_name(3) == f"rlsim-{home_id()}-slot3"


def test_only_this_homes_unknown_sessions_are_orphans():
    home = "0123abcd"
    assert is_orphan({LABEL: "gone", HOME_LABEL: home}, {"live"}, home)
    assert not is_orphan({LABEL: "live", HOME_LABEL: home}, {"live"}, home)
    assert not is_orphan({LABEL: "gone", HOME_LABEL: "ffffffff"}, {"live"}, home)  # another home
    assert not is_orphan({LABEL: "gone"}, {"live"}, home)  # made without a home label
    assert not is_orphan(None, set(), home)
