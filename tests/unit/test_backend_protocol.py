"""Every full backend offers the whole Backend protocol (the compliance suite then checks that
they behave alike on real clusters)."""

import pytest

from rlsim import Backend, DockerCluster, LocalCluster

MEMBERS = sorted(m for m in Backend.__dict__ if not m.startswith("_"))


@pytest.mark.parametrize("cls", [LocalCluster, DockerCluster], ids=lambda c: c.__name__)
def test_backend_offers_every_protocol_member(cls):
    assert "probe" in MEMBERS and "kill_node" in MEMBERS
    missing = [m for m in MEMBERS if not hasattr(cls, m)]
    assert missing == []
