"""Every backend offers the whole Backend protocol, and the capabilities each has are the ones
its faults rely on (the compliance suite then checks that they behave alike on real clusters)."""

import pytest

from rlsim.backends import base, cluster_class
from rlsim.backends.real import RealCluster

CAPABILITIES = [base.KillsNodes, base.RestartsNodes, base.PausesNodes, base.CutsNetwork,
                base.KillsProcesses, base.SqueezesMemory, base.HoldsGpuMemory,
                base.CapsDisk]


def members(protocol: type) -> set[str]:
    return {m for k in protocol.__mro__ if getattr(k, "_is_protocol", False) and k is not
            base.Protocol for m in vars(k) if not m.startswith("_")} - {"name", "spec"}


@pytest.mark.parametrize("cls,protocol", [(cluster_class("local"), base.StartsClusters),
                                          (cluster_class("docker"), base.StartsClusters),
                                          (RealCluster, base.Backend)],
                         ids=["local", "docker", "real"])
def test_backend_offers_every_member_of_its_protocol(cls, protocol):
    assert {"start", "nodes", "stop"} <= members(protocol)
    assert sorted(m for m in members(protocol) if not hasattr(cls, m)) == []


@pytest.mark.parametrize("cls,has", [
    (cluster_class("local"), set(CAPABILITIES)),
    (cluster_class("docker"), set(CAPABILITIES) - {base.CapsDisk}),
    (RealCluster, {base.KillsNodes, base.KillsProcesses, base.HoldsGpuMemory}),
], ids=["local", "docker", "real"])
def test_capabilities_are_what_the_backend_implements(cls, has):
    assert {c for c in CAPABILITIES if issubclass(cls, c)} == has
    for cap in has:
        assert all(hasattr(cls, m) for m in members(cap))
