"""Every backend offers the whole Backend protocol, and the capabilities each has are the ones
its faults rely on (the compliance suite then checks that they behave alike on real clusters)."""

from typing import get_args

import pytest

from rlsim.backends import BACKENDS, BackendName, base, chosen, cluster_class, names
from rlsim.backends.disks_here import DisksHere, DisksHereNeed
from rlsim.backends.node_verbs import NodeVerbs, NodeVerbsNeed
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


HARNESS = [base.WarmsWorkers, base.SpreadsOverMachines, base.ShowsFaultResidue,
           base.ReportsRay, base.KeepsLogs]


@pytest.mark.parametrize("cluster,has", [
    (cluster_class("local")(), set(HARNESS) - {base.SpreadsOverMachines}),
    (cluster_class("docker")(), set(HARNESS) - {base.SpreadsOverMachines}),
    (cluster_class("substrate")(on="10.0.0.1:6379"), set(HARNESS)),
    (RealCluster("10.0.0.1:6379"), set()),
], ids=["local", "docker", "substrate", "real"])
def test_what_the_harness_may_use_is_what_the_backend_declares(cluster, has):
    """The runner and the pool ask a cluster for these with isinstance, never by a method's
    name; a cluster not started answers too (none of them reads a property)."""
    assert {p for p in HARNESS if isinstance(cluster, p)} == has


def needs(protocol: type) -> set[str]:
    """What a mixin's protocol asks of the class it is mixed into, private names included."""
    return {m for m in vars(protocol) if not m.startswith("__")
            and m not in ("_abc_impl", "_is_protocol", "_is_runtime_protocol")}


@pytest.mark.parametrize("mixin,need", [(NodeVerbs, NodeVerbsNeed), (DisksHere, DisksHereNeed)])
def test_every_backend_that_takes_a_mixin_gives_what_it_needs(mixin, need):
    takers = [cls for name in BACKENDS if issubclass(cls := cluster_class(name), mixin)]
    assert {cls.name for cls in takers} == {"local", "substrate"}
    for cls in takers:
        assert sorted(m for m in needs(need) if not hasattr(cls, m)) == [], cls.name


def test_a_mixin_alone_lacks_what_it_needs():
    """The check above can fail: the verbs without a started cluster under them."""
    bare = type("Bare", (NodeVerbs,), {})
    assert sorted(m for m in needs(NodeVerbsNeed) if not hasattr(bare, m)) == [
        "_check_cgroup", "_check_index", "_node", "_st"]
