"""A link's delay and jitter, in user space: packets that netfilter queues (``-j NFQUEUE
--queue-num N``) are held here for their delay, then let through.

Why here and not netem: ``tc``'s netem qdisc is the usual tool, but many kernels built for small
VMs (Firecracker's, this project's development machine) ship without ``sch_netem`` and without
the ``fw`` classifier that would pick a node's marked packets on loopback. Netfilter queueing is in
every kernel iptables runs on: the kernel hands each matching packet's id to this process over
netlink (``nfnetlink_queue``), and the packet waits, unsent, until we give our verdict. So the
delay is real: the packet really leaves ``delay_ms`` (± ``jitter_ms``, uniform; a packet may
overtake another, as with netem's jitter) after it was sent. Loss is the kernel's own, an
iptables ``statistic`` rule beside the queue rule (see :mod:`rlsim.host.links`).

The rule is written with ``--queue-bypass``: while no delayer listens (before it binds, after it
died) packets pass undelayed, never black-holed. Packets held when this process ends are dropped
by the kernel, and TCP sends them again.

Run: ``python -m rlsim.host.delayer QUEUE DELAY_MS JITTER_MS SEED`` (one per queue; SIGTERM ends
it). The netlink messages are built here (``struct``), with no library to install.
"""

from __future__ import annotations

import heapq
import os
import random
import select
import signal
import socket
import struct
import sys
import time
from pathlib import Path

NETLINK_NETFILTER = 12
NFNL_SUBSYS_QUEUE = 3
MSG_PACKET, MSG_VERDICT, MSG_CONFIG = 0, 1, 2
CFG_CMD, CFG_PARAMS, CFG_QUEUE_MAXLEN, CFG_MASK, CFG_FLAGS = 1, 2, 3, 4, 5
CMD_BIND = 1
COPY_META = 1
F_FAIL_OPEN = 1  # a full queue lets packets through rather than dropping them
ATTR_PACKET_HDR, ATTR_VERDICT_HDR = 1, 2
NF_ACCEPT = 1
NLM_F_REQUEST, NLM_F_ACK = 1, 4
NLMSG_ERROR = 2
SOL_NETLINK, NETLINK_NO_ENOBUFS = 270, 5
QUEUE_MAXLEN = 65536


def _attr(kind: int, payload: bytes) -> bytes:
    data = struct.pack("=HH", 4 + len(payload), kind) + payload
    return data + b"\0" * (-len(data) % 4)


def message(msg: int, queue: int, attrs: bytes, seq: int = 0, ack: bool = False) -> bytes:
    """One nfnetlink message to the queue subsystem: netlink header, nfgenmsg, attributes."""
    body = struct.pack("=BBH", socket.AF_UNSPEC, 0, socket.htons(queue)) + attrs
    flags = NLM_F_REQUEST | (NLM_F_ACK if ack else 0)
    return struct.pack("=IHHII", 16 + len(body), (NFNL_SUBSYS_QUEUE << 8) | msg, flags, seq,
                       0) + body


def bind_messages(queue: int) -> list[bytes]:
    """Bind ``queue``, copy packets' metadata only (their ids), a long queue that fails open."""
    return [
        message(MSG_CONFIG, queue, _attr(CFG_CMD, struct.pack("=BxH", CMD_BIND, 0)), 1, True),
        message(MSG_CONFIG, queue, _attr(CFG_PARAMS, struct.pack("!IB", 0, COPY_META) + b"\0"),
                2, True),
        message(MSG_CONFIG, queue, _attr(CFG_QUEUE_MAXLEN, struct.pack("!I", QUEUE_MAXLEN)),
                3, True),
        message(MSG_CONFIG, queue, _attr(CFG_FLAGS, struct.pack("!I", F_FAIL_OPEN)) +
                _attr(CFG_MASK, struct.pack("!I", F_FAIL_OPEN)), 4, True),
    ]


def verdict(queue: int, packet_id: int) -> bytes:
    return message(MSG_VERDICT, queue, _attr(ATTR_VERDICT_HDR,
                                             struct.pack("!II", NF_ACCEPT, packet_id)))


def packet_ids(data: bytes) -> tuple[list[int], list[int]]:
    """The ids of the packets in a netlink read, and the errors it acknowledges (0: ok)."""
    ids, errors = [], []
    off = 0
    while off + 16 <= len(data):
        length, kind = struct.unpack_from("=IH", data, off)
        if length < 16:
            break
        if kind == NLMSG_ERROR:
            errors.append(-struct.unpack_from("=i", data, off + 16)[0])
        elif kind == (NFNL_SUBSYS_QUEUE << 8) | MSG_PACKET:
            a = off + 20
            while a + 4 <= off + length:
                alen, akind = struct.unpack_from("=HH", data, a)
                if alen < 4:
                    break
                if akind & 0x7FFF == ATTR_PACKET_HDR:
                    ids.append(struct.unpack_from("!I", data, a + 4)[0])
                a += (alen + 3) & ~3
        off += (length + 3) & ~3
    return ids, errors


def run(queue: int, delay_ms: float, jitter_ms: float, seed: int) -> None:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.setsockopt(SOL_NETLINK, NETLINK_NO_ENOBUFS, 1)
    sock.bind((0, 0))
    for msg in bind_messages(queue):
        sock.send(msg)
        _, errors = packet_ids(sock.recv(65536))
        if any(errors):
            raise OSError(errors[0], f"binding netfilter queue {queue}: "
                          f"{os.strerror(errors[0])}")
    rng = random.Random(seed)
    held: list[tuple[float, int]] = []
    stop = False

    def end(*_):
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, end)
    signal.signal(signal.SIGINT, end)
    print(f"delayer: queue {queue} bound", flush=True)
    while not stop:
        now = time.monotonic()
        while held and held[0][0] <= now:
            sock.send(verdict(queue, heapq.heappop(held)[1]))
        wait = max(0.0, held[0][0] - now) if held else 0.5
        try:
            ready, _, _ = select.select([sock], [], [], wait)
        except InterruptedError:
            continue
        if not ready:
            continue
        ids, _ = packet_ids(sock.recv(1 << 20))
        now = time.monotonic()
        for pid in ids:
            d = delay_ms + (rng.uniform(-jitter_ms, jitter_ms) if jitter_ms else 0.0)
            heapq.heappush(held, (now + max(0.0, d) / 1000, pid))
    for _, pid in held:  # let what is held go now rather than have it dropped
        sock.send(verdict(queue, pid))


def command(queue: int, delay_ms: float, jitter_ms: float, seed: int) -> list[str]:
    """The command line of a delayer for ``queue``."""
    return [sys.executable, "-m", "rlsim.host.delayer", str(queue), f"{delay_ms:g}",
            f"{jitter_ms:g}", str(seed)]


def is_delayer(pid: int) -> bool:
    """Whether ``pid`` runs a delayer (its command line says so)."""
    try:
        return b"rlsim.host.delayer" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


if __name__ == "__main__":
    q, d, j, s = sys.argv[1:5]
    try:
        run(int(q), float(d), float(j), int(s))
    except OSError as e:
        sys.exit(f"rlsim.host.delayer: {e}")
