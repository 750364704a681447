"""A disk fault on a substrate mounts over the run's directory here: only where every machine
sees this machine's mounts (namespaces of it); separate machines are refused in words."""

from dataclasses import replace

import pytest

from rlsim.backends.substrate.cluster import SubstrateCluster
from rlsim.backends.substrate.hosts import Machine
from rlsim.host import disk

HERE = Machine(node_id="a", address="10.0.0.1", cpus=2, memory_bytes=1 << 30, root=True,
               iptables=True, cgroups=True, interface="eth0", mounts=disk.mount_table())


def test_the_mount_table_names_the_kernel_and_the_namespace():
    boot, ns = disk.mount_table().split("/")
    assert len(boot) == 36 and ns.isdigit()


def test_machines_that_share_this_kernel_s_mounts_take_a_disk_fault(tmp_path):
    cluster = SubstrateCluster(on="10.0.0.1:6379")
    cluster._machines = [HERE, replace(HERE, address="10.0.0.2")]
    cluster._check_mounts(tmp_path)


def test_separate_machines_are_refused_a_disk_fault_naming_them(tmp_path):
    cluster = SubstrateCluster(on="10.0.0.1:6379")
    # a second machine: another kernel, though its first mount namespace has the same number
    other = replace(HERE, address="10.0.0.2",
                    mounts="0" * 36 + "/" + disk.mount_table().split("/")[1])
    cluster._machines = [HERE, other]
    with pytest.raises(RuntimeError, match=rf"{tmp_path}: .*machine\(s\) 10.0.0.2 do not see "
                                           r"this machine's mounts.*run this scenario without "
                                           r"cluster.on"):
        cluster._check_mounts(tmp_path)
