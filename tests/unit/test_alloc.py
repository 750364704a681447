import itertools

import pytest

from rlsim.host import layout as alloc


def all_ports(plan):
    ports = [plan.gcs_port, plan.dashboard_port, plan.client_port]
    for n in plan.nodes:
        p = n.ports
        ports += [getattr(p, d) for d in alloc.NODE_DAEMONS]
        ports += list(range(p.min_worker, p.max_worker + 1))
    return ports


def test_every_node_has_its_own_loopback_address_never_127_0_0_1():
    plan = alloc.lay_out(slot=3, nodes=4)
    addrs = [n.address for n in plan.nodes]
    assert addrs == ["127.77.3.10", "127.77.3.11", "127.77.3.12", "127.77.3.13"]
    assert "127.0.0.1" not in addrs
    assert plan.gcs_address == "127.77.3.10:23000"
    assert plan.dashboard_url == "http://127.77.3.10:23001"


@pytest.mark.parametrize("nodes", [1, 4, 16, 17, alloc.MAX_NODES])
def test_ports_are_unique_and_inside_the_slot_block(nodes):
    plan = alloc.lay_out(slot=5, nodes=nodes)
    ports = all_ports(plan)
    assert len(ports) == len(set(ports))
    lo, hi = plan.port_range
    assert all(lo <= p <= hi for p in ports)


@pytest.mark.parametrize("nodes", [32, alloc.MAX_NODES])
def test_no_two_slots_share_a_port_or_an_address(nodes):
    span = alloc.span(nodes)
    plans = [alloc.lay_out(s, nodes) for s in range(0, alloc.MAX_SLOTS - span + 1, span)]
    for a, b in itertools.combinations(plans, 2):
        assert not set(all_ports(a)) & set(all_ports(b))
        assert not {n.address for n in a.nodes} & {n.address for n in b.nodes}
        assert not set(a.slots) & set(b.slots)


def test_ports_stay_below_the_ephemeral_range_and_ray_defaults():
    plan = alloc.lay_out(alloc.MAX_SLOTS - alloc.span(alloc.MAX_NODES), alloc.MAX_NODES)
    assert max(all_ports(plan)) < 32768
    assert min(all_ports(alloc.lay_out(0, 1))) >= 20000  # above Ray's 10002-19999 workers


def test_up_to_16_nodes_keep_60_ports_and_32_share_the_block_with_20_worker_ports_each():
    assert alloc.node_stride(16) == 60 and alloc.worker_ports(16) == 50
    plan = alloc.lay_out(0, 32)
    assert plan.span == 1 and plan.port_block == (20000, 20999)
    assert [n.ports.max_worker - n.ports.min_worker + 1 for n in plan.nodes] == [20] * 32
    assert plan.nodes[-1].address == "127.77.0.41"


def test_64_nodes_span_two_slots_with_21_worker_ports_each():
    plan = alloc.lay_out(3, 64)
    assert alloc.MAX_NODES == 64 and plan.span == 2 and list(plan.slots) == [3, 4]
    assert plan.port_block == (23000, 24999)
    assert [n.ports.max_worker - n.ports.min_worker + 1 for n in plan.nodes] == [21] * 64
    assert plan.nodes[-1].address == "127.77.3.73"  # every node in its first slot's block
    with pytest.raises(ValueError, match="2 slot"):
        alloc.lay_out(alloc.MAX_SLOTS - 1, 64)


def test_a_shape_whose_workers_outnumber_their_ports_is_refused_naming_the_fix():
    from rlsim.host.spec import ClusterShape

    ClusterShape(nodes=32, gpus_per_node=8, cpus_per_node=4)  # 14 workers, 20 ports
    with pytest.raises(ValueError, match="may run 22 Ray workers at once .* but has 20 worker "
                       "ports.*use fewer nodes or GPUs per node"):
        ClusterShape(nodes=32, gpus_per_node=16, cpus_per_node=4)


def test_too_many_nodes_names_the_limit():
    with pytest.raises(ValueError, match=f"1..{alloc.MAX_NODES}"):
        alloc.lay_out(0, alloc.MAX_NODES + 1)
    with pytest.raises(ValueError, match="slot"):
        alloc.lay_out(alloc.MAX_SLOTS, 2)


def test_named_ports_cover_head_services_and_worker_ranges():
    plan = alloc.lay_out(0, 2)
    names = alloc.named_ports(plan)
    assert names["gcs"] == (20000, 20000)
    assert names["workers:1"] == (plan.nodes[1].ports.min_worker, plan.nodes[1].ports.max_worker)
