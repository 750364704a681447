"""Every backend offers the whole Backend protocol, and the capabilities each has are the ones
its faults rely on (the compliance suite then checks that they behave alike on real clusters)."""

from typing import get_args

import pytest

from rlsim.backends import BackendName, base, chosen, cluster_class, names
from rlsim.backends.real import RealCluster

CAPABILITIES = [base.KillsNodes, base.RestartsNodes, base.PausesNodes, base.CutsNetwork,
                base.KillsProcesses, base.SqueezesMemory, base.HoldsGpuMemory,
                base.CapsDisk]


def members(protocol: type) -> set[str]:
    return {m for k in protocol.__mro__ if getattr(k, "_is_protocol", False) and k is not
            base.Protocol for m in vars(k) if not m.startswith("_")} - {"name", "spec"}


@pytest.mark.parametrize("cls,protocol", [(cluster_class("local"), base.StartsClusters),
                                          (cluster_class("docker"), base.StartsClusters),
                                          (cluster_class("substrate"), base.StartsClusters),
                                          (RealCluster, base.Backend)],
                         ids=["local", "docker", "substrate", "real"])
def test_backend_offers_every_member_of_its_protocol(cls, protocol):
    assert {"start", "nodes", "stop"} <= members(protocol)
    assert sorted(m for m in members(protocol) if not hasattr(cls, m)) == []


@pytest.mark.parametrize("cls,has", [
    (cluster_class("local"), set(CAPABILITIES)),
    (cluster_class("docker"), set(CAPABILITIES) - {base.CapsDisk}),
    (cluster_class("substrate"), set(CAPABILITIES)),
    (RealCluster, {base.KillsNodes, base.KillsProcesses, base.HoldsGpuMemory}),
], ids=["local", "docker", "substrate", "real"])
def test_capabilities_are_what_the_backend_implements(cls, has):
    assert {c for c in CAPABILITIES if issubclass(cls, c)} == has
    for cap in has:
        assert all(hasattr(cls, m) for m in members(cap))


def test_a_substrate_s_address_chooses_its_backend_which_no_one_names():
    """The one place `cluster.on` (`rlsim cluster --on`) picks the substrate: the registry. Its
    name is in no `--backend` and no scenario key, yet its state files carry it, and attaching
    or reaping one reads it there like any backend's."""
    assert chosen("local", "10.0.0.1:6379") == "substrate"
    assert chosen("docker") == "docker" and chosen("local", None) == "local"
    assert "substrate" not in names() and "substrate" not in get_args(BackendName)
    assert cluster_class("substrate").name == "substrate"
    with pytest.raises(ValueError, match="unknown backend 'substrate'"):
        chosen("substrate")
