"""Who listens where on this machine: the TCP listening sockets of the machine's network namespace,
read from ``/proc/net/tcp`` and ``/proc/net/tcp6`` (readable by every user, whoever owns the
socket), and which of them a given set of processes holds.

A cluster's slot (:mod:`rlsim.host.slots`) is free only where nothing listens on its addresses or in
its port block: another user's cluster, another rlsim home's, an older rlsim, or any program that
bound those ports. And a node joins its cluster's GCS only where that GCS is a process of its own
cluster: a GCS port held by someone else would make the node a member of their cluster.
"""

from __future__ import annotations

import ipaddress
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
TABLES = (PROC / "net" / "tcp", PROC / "net" / "tcp6")
LISTEN = "0A"  # the kernel's TCP_LISTEN, as /proc/net/tcp writes a socket's state


@dataclass(frozen=True)
class Listener:
    address: str  # "0.0.0.0" / "::" for every address; an IPv4-mapped IPv6 address as IPv4
    port: int
    inode: int

    def __str__(self) -> str:
        host = f"[{self.address}]" if ":" in self.address else self.address
        return f"{host}:{self.port}"

    @property
    def wildcard(self) -> bool:
        return self.address in ("0.0.0.0", "::")


def _address(hex_addr: str) -> str:
    """An address as /proc/net/tcp{,6} writes it (32-bit words in the host's byte order)."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
    if len(words) == 4:
        return str(ipaddress.IPv4Address(words))
    ip = ipaddress.IPv6Address(words)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


def parse(text: str) -> list[Listener]:
    """The listening sockets of one /proc/net/tcp{,6} table."""
    found = []
    for line in text.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != LISTEN:
            continue
        host, _, port = fields[1].partition(":")
        found.append(Listener(_address(host), int(port, 16), int(fields[9])))
    return found


def listening() -> list[Listener]:
    """Every TCP listener of this network namespace."""
    found = []
    for table in TABLES:
        try:
            found += parse(table.read_text())
        except FileNotFoundError:  # no IPv6 here
            continue
    return found


def in_block(listeners: list[Listener], prefix: str, ports: tuple[int, int]) -> list[Listener]:
    """The listeners that hold an address under ``prefix`` (``"127.77.3."``) or a port of
    ``ports`` (inclusive) on any address."""
    lo, hi = ports
    return [sock for sock in listeners
            if sock.address.startswith(prefix) or lo <= sock.port <= hi]


def at(listeners: list[Listener], address: str, port: int) -> list[Listener]:
    """The listeners that would answer a connection to ``address:port``."""
    return [sock for sock in listeners
            if sock.port == port and (sock.address == address or sock.wildcard)]


def held_by(inodes: set[int], pids: list[int]) -> bool:
    """Whether one of ``pids`` holds a socket of ``inodes`` open (each fd's link reads
    ``socket:[inode]``). Only this user's processes (or any, as root) can be read."""
    wanted = {f"socket:[{inode}]" for inode in inodes}
    for pid in pids:
        fd_dir = PROC / str(pid) / "fd"
        try:
            names = os.listdir(fd_dir)
        except OSError:
            continue
        for name in names:
            try:
                if os.readlink(fd_dir / name) in wanted:
                    return True
            except OSError:
                continue
    return False


def interface(address: str | None) -> str | None:
    """The network interface that holds ``address`` (the node's Ray address), from ``ip``."""
    if not address or not shutil.which("ip"):
        return None
    out = subprocess.run(["ip", "-o", "addr", "show"], capture_output=True, text=True,
                         timeout=5).stdout
    for line in out.splitlines():
        parts = line.split()
        if len(parts) > 3 and parts[3].split("/")[0] == address:
            return parts[1]
    # loopback answers for all of 127.0.0.0/8, though only 127.0.0.1 is listed
    return "lo" if address.startswith("127.") else None
