"""degrade_link's and flap_link's pure parts: which packets cross a link, the iptables words that
mark, lose and queue them (loopback nodes and node namespaces), the delayer's netlink messages as
the kernel reads them, and the faults' parameters refused in words."""

from __future__ import annotations

import random
import socket
import struct

import pytest

from rlsim.faults import FAULTS
from rlsim.host import delayer, links
from rlsim.host.home import home_id
from rlsim.host.layout import lay_out
from rlsim.host.links import LinkShape
from rlsim.scenario.schema import FaultEntry

H = home_id()
PLAN = lay_out(0, 3)  # 127.77.0.10-12


def test_a_nodes_link_is_crossed_both_ways_by_every_pair_it_separates():
    assert links.crossing([0, 1, 2], [[1]]) == [(0, 1), (1, 0), (1, 2), (2, 1)]
    assert links.crossing([0, 1, 2, 3], [[0, 1], [2, 3]]) == [
        (0, 2), (0, 3), (1, 2), (1, 3), (2, 0), (2, 1), (3, 0), (3, 1)]


def test_loss_comes_before_the_delay_and_is_a_probability():
    shape = LinkShape(delay_ms=40, jitter_ms=10, loss_pct=2)
    assert shape.targets(21000) == [
        (("-m", "statistic", "--mode", "random", "--probability", "0.020000"), ("-j", "DROP")),
        ((), ("-j", "NFQUEUE", "--queue-num", "21000", "--queue-bypass"))]
    assert LinkShape(loss_pct=100).targets(None) == [
        (("-m", "statistic", "--mode", "random", "--probability", "1.000000"), ("-j", "DROP"))]
    with pytest.raises(ValueError, match="queue"):
        LinkShape(delay_ms=1).targets(None)


def test_on_loopback_a_pair_marks_its_connection_and_the_mark_gets_the_loss_and_the_queue():
    rules = links.loopback_rules([n.address for n in PLAN.nodes], "s1", [(1, 0), (0, 1)],
                                 LinkShape(50, 0, 1), 0x52000abc, 20001)
    words = [r.args("c") for r in rules]
    assert words[0] == ["-m", "cgroup", "--path", f"rlsim/{H}.s1/n1", "-d", "127.77.0.10",
                        "-m", "comment", "--comment", "c", "-j", "CONNMARK", "--set-mark",
                        "0x52000abc"]
    assert words[1][3:6] == [f"rlsim/{H}.s1/n0", "-d", "127.77.0.11"]
    assert words[2][:4] == ["-m", "connmark", "--mark", "0x52000abc"] and words[2][-2:] == [
        "-j", "DROP"]
    assert words[3] == ["-m", "connmark", "--mark", "0x52000abc", "-m", "comment",
                        "--comment", "c", "-j", "NFQUEUE", "--queue-num", "20001",
                        "--queue-bypass"]


def test_in_namespaces_each_sender_gets_rules_by_receiver_address():
    got = links.namespace_rules(["10.0.0.10", "10.0.0.11", "10.0.0.12"], [(1, 0), (0, 1),
                                                                          (1, 2), (2, 1)],
                                LinkShape(delay_ms=5), 20002)
    assert got == {
        1: [["-d", "10.0.0.10", "-j", "NFQUEUE", "--queue-num", "20002", "--queue-bypass"],
            ["-d", "10.0.0.12", "-j", "NFQUEUE", "--queue-num", "20002", "--queue-bypass"]],
        0: [["-d", "10.0.0.11", "-j", "NFQUEUE", "--queue-num", "20002", "--queue-bypass"]],
        2: [["-d", "10.0.0.11", "-j", "NFQUEUE", "--queue-num", "20002", "--queue-bypass"]]}


def test_a_queue_is_one_no_delayer_listens_on_and_a_mark_is_tagged():
    listing = "20000  12345     0 2 65531     0     0        0  1\n20001 1 0 2 1 0 0 0 1\n"
    assert links.bound_queues(listing) == {20000, 20001}
    rng = random.Random(0)
    taken = set(range(20000, 59999))
    assert links.free_queue(rng, taken) == 59999
    assert links.new_mark(rng) >> 24 == 0x52


def test_the_delayers_messages_are_netlink_as_the_kernel_reads_them():
    bind = delayer.bind_messages(20003)
    length, kind, flags, seq, _ = struct.unpack_from("=IHHII", bind[0])
    assert length == len(bind[0]) and kind == (3 << 8) | 2 and flags == 1 | 4 and seq == 1
    family, version, res = struct.unpack_from("=BBH", bind[0], 16)
    assert (family, version, socket.ntohs(res)) == (socket.AF_UNSPEC, 0, 20003)
    nla_len, nla_type, command = struct.unpack_from("=HHB", bind[0], 20)
    assert (nla_len, nla_type, command) == (8, 1, 1)  # NFQA_CFG_CMD: bind
    flags_msg = bind[3]
    assert struct.unpack_from("=HH", flags_msg, 20) == (8, 5)  # NFQA_CFG_FLAGS
    assert struct.unpack_from("=HH", flags_msg, 28) == (8, 4)  # NFQA_CFG_MASK
    v = delayer.verdict(20003, 77)
    assert struct.unpack_from("!II", v, 24) == (1, 77)  # NF_ACCEPT, packet 77


def test_packet_ids_and_errors_are_read_from_one_netlink_read():
    def packet(pid: int) -> bytes:
        attr = struct.pack("=HH", 11, 1) + struct.pack("!IHB", pid, 0x0800, 3) + b"\0"
        body = struct.pack("=BBH", 0, 0, 0) + attr
        return struct.pack("=IHHII", 16 + len(body), (3 << 8) | 0, 0, 0, 0) + body

    ack = struct.pack("=IHHII", 36, 2, 0, 1, 0) + struct.pack("=i", -22) + b"\0" * 16
    assert delayer.packet_ids(packet(5) + packet(6) + ack) == ([5, 6], [22])


@pytest.mark.parametrize("params,said", [
    ({"nodes": [1]}, "give delay_ms or loss_pct"),
    ({"nodes": [1], "groups": [[1]], "delay_ms": 5}, "name the link once"),
    ({"delay_ms": 5}, "name the link once"),
    ({"nodes": [1], "delay_ms": 5, "jitter_ms": 9}, "cannot leave before it is sent"),
    ({"nodes": [1, 1], "delay_ms": 5}, "named twice"),
    ({"nodes": [1], "loss_pct": 101}, "less than or equal to 100"),
    ({"groups": [[1], [1]], "delay_ms": 5}, "node 1 is named twice"),
])
def test_degrade_link_refuses_a_link_that_is_not_one(params, said):
    with pytest.raises(ValueError, match=said):
        FaultEntry.model_validate({"at": {"step": 1}, "degrade_link": params})


def test_a_link_around_every_node_crosses_nothing():
    fault = FAULTS["degrade_link"]
    params = fault.Params(nodes=[0, 1], delay_ms=5)
    shape = type("Shape", (), {"nodes": 2})()
    assert fault.cluster_problem(params, shape)[0] == "nodes"
    assert fault.cluster_problem(fault.Params(nodes=[1], delay_ms=5), shape) is None


@pytest.mark.parametrize("params,said", [
    ({"groups": [[1]], "period_s": 2, "down_s": 2}, "that is a partition"),
    ({"groups": [[1]], "period_s": 2}, "down_s"),
    ({"groups": [], "period_s": 2, "down_s": 1}, "at least 1"),
])
def test_flap_link_refuses_a_flap_that_never_comes_back(params, said):
    with pytest.raises(ValueError, match=said):
        FaultEntry.model_validate({"at": {"step": 1}, "flap_link": params})
