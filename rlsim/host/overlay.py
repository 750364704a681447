"""Addresses of their own for simulated nodes that share a substrate machine
(:mod:`rlsim.backends.substrate`): the first node on a machine runs at the machine's address,
each further one at ``198.18.<slot>.<10 + index>`` (the cluster's slot and the node's index, as
``127.77.<slot>.<10 + index>`` on one machine). 198.18.0.0/15 is the block set aside for
network tests (RFC 2544): no real network uses it.

On its machine the address sits on an interface of its own, ``rls<slot>n<index>`` (one end of a
veth pair whose other end, ``...p``, is only there to make it: kernels without the dummy
interface's module have veth, which namespace machines need anyway): the kernel takes packets
for a local address from any interface, and the node's gloo process groups bind it by that name
(``GLOO_SOCKET_IFNAME``), so a partition aimed at the address cuts them too. Every other
machine reaches it by a host route through the machine's address; so does the machine that runs
the driver, which must be one of the substrate's.

Run as root on the machine, inside its network namespace (a host actor is).
"""

from __future__ import annotations

import ipaddress
import subprocess

PREFIX = "198.18"
NETWORK = ipaddress.ip_network("198.18.0.0/15")
IFACE_PREFIX = "rls"


def address(slot: int, index: int) -> str:
    return f"{PREFIX}.{slot}.{10 + index}"


def iface(slot: int, index: int) -> str:
    return f"{IFACE_PREFIX}{slot}n{index}"  # at most 15 characters: rls11n63


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def join(slot: int, own: dict[int, str], routes: dict[str, str]) -> None:
    """On this machine: each node of ``own`` (index -> address) on its interface, and a
    host route to each address of ``routes`` (address -> the machine address it lives on)."""
    for index, addr in own.items():
        name = iface(slot, index)
        _ip("link", "del", name, check=False)  # a crashed run's, of this slot
        _ip("link", "add", name, "type", "veth", "peer", "name", f"{name}p")
        _ip("addr", "add", f"{addr}/32", "dev", name)
        _ip("link", "set", f"{name}p", "up")
        _ip("link", "set", name, "up")
    for addr, via in routes.items():
        _ip("route", "replace", f"{addr}/32", "via", via)


def leave(slot: int) -> list[str]:
    """This machine's interfaces and routes of ``slot``'s nodes removed; what could not be."""
    for name in interfaces(slot):
        _ip("link", "del", name, check=False)
    for addr in routes(slot):
        _ip("route", "del", f"{addr}/32", check=False)
    return [f"interface {n}" for n in interfaces(slot)] + [f"route {a}" for a in routes(slot)]


def interfaces(slot: int) -> list[str]:
    """The interfaces of ``slot``'s nodes on this machine (deleting one deletes its peer)."""
    out = _ip("-o", "link", "show", "type", "veth", check=False).stdout
    names = [ln.split(":")[1].strip().split("@")[0] for ln in out.splitlines() if ":" in ln]
    return [n for n in names if n.startswith(f"{IFACE_PREFIX}{slot}n") and not n.endswith("p")]


def routes(slot: int) -> list[str]:
    """The host routes to ``slot``'s node addresses on this machine."""
    out = _ip("-o", "route", "show", check=False).stdout
    mine = f"{PREFIX}.{slot}."
    return [ln.split()[0].removesuffix("/32") for ln in out.splitlines()
            if ln.split() and ln.split()[0].startswith(mine) and " via " in ln]
