import pytest

from rlsim.host import iptables
from rlsim.host.home import home_id
from rlsim.host.layout import lay_out

H = home_id()  # the cgroup of a node carries its home's id

PLAN = lay_out(0, 4)


def test_grudge_is_symmetric_and_puts_unnamed_nodes_together():
    g = iptables.grudge([0, 1, 2, 3], [[2]])
    assert g[2] == {0, 1, 3}
    assert g[0] == {2} and g[1] == {2} and g[3] == {2}
    for a, cut in g.items():
        for b in cut:
            assert a in g[b]


def test_grudge_with_explicit_groups():
    g = iptables.grudge([0, 1, 2, 3], [[0, 1], [2, 3]])
    assert g == {0: {2, 3}, 1: {2, 3}, 2: {0, 1}, 3: {0, 1}}


@pytest.mark.parametrize(
    "groups, msg", [([[7]], "node 7"), ([[1], [1, 2]], "two groups")]
)
def test_grudge_rejects_bad_groups(groups, msg):
    with pytest.raises(ValueError, match=msg):
        iptables.grudge([0, 1, 2, 3], groups)


def test_partition_drops_each_direction_by_sender_cgroup_and_receiver_address():
    rules = iptables.partition_rules(PLAN, "s1", [[3]])
    pairs = {(r.src, r.dst) for r in rules}
    assert (f"rlsim/{H}.s1/n3", "127.77.0.10") in pairs
    assert (f"rlsim/{H}.s1/n0", "127.77.0.13") in pairs
    assert len(rules) == 6  # 3 <-> {0,1,2}, both ways
    assert all(r.ports is None for r in rules)


def test_block_port_from_one_source():
    rules = iptables.block_port_rules(PLAN, "s1", node=0, ports=(20000, 20000), sources=[2])
    assert rules == [iptables.Drop(f"rlsim/{H}.s1/n2", "127.77.0.10", (20000, 20000))]
    args = rules[0].args("rlsim:s1")
    assert args[:4] == ["-m", "cgroup", "--path", f"rlsim/{H}.s1/n2"]
    assert "--dport" in args and "20000" in args and args[-1] == "DROP"


def test_block_port_from_everyone_spares_the_node_itself():
    (rule,) = iptables.block_port_rules(PLAN, "s1", node=1, ports=(20080, 20119))
    assert rule.exclude_src and rule.src == f"rlsim/{H}.s1/n1" and rule.dst == "127.77.0.11"
    args = rule.args("c")
    assert args[:5] == ["-m", "cgroup", "!", "--path", f"rlsim/{H}.s1/n1"]
    assert "20080:20119" in args


def test_block_port_validates_node_and_ports():
    with pytest.raises(ValueError, match="node 9"):
        iptables.block_port_rules(PLAN, "s", node=9, ports=(1, 1))
    with pytest.raises(ValueError, match="port range"):
        iptables.block_port_rules(PLAN, "s", node=0, ports=(10, 5))


def test_reject_uses_tcp_reset_for_port_rules():
    args = iptables.Drop("x", "127.77.0.10", (1, 2), reject=True).args("c")
    assert args[-4:] == ["-j", "REJECT", "--reject-with", "tcp-reset"]


def test_chain_names_carry_the_home_id_and_fit_iptables_limit():
    assert iptables.chain_name(3, home="0123abcd") == "RLSIM-0123abcd-3"
    assert iptables.chain_name(7) == f"RLSIM-{home_id()}-7"
    assert len(iptables.chain_name(99999, home="ffffffff")) <= 28
    assert iptables.Firewall(4, "s").chain == iptables.chain_name(4)


def test_own_chains_leaves_other_homes_and_unscoped_chains():
    listing = "\n".join([
        "-P INPUT ACCEPT",
        "-N RLSIM-0123abcd-1",
        "-N RLSIM-0123abcd-12",
        "-N RLSIM-ffffffff-1",  # another user's or CI job's home
        "-N RLSIM-1",  # no home id: not ours to remove
        "-A OUTPUT -j RLSIM-0123abcd-1",
    ])
    ours = ["RLSIM-0123abcd-1", "RLSIM-0123abcd-12"]
    assert iptables.own_chains(listing, home="0123abcd") == ours
