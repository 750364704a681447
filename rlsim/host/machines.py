"""Network namespaces as machines: several "hosts" on one machine, each with an address of its own
on a network of their own, for the tests and benches of clusters that span machines.

``with NamespaceMachines(3) as m:`` makes a Linux bridge and three network namespaces, each joined
to the bridge by a veth pair whose inner end is the namespace's ``eth0`` at ``10.R.i.1/16``
(``m.address(i)``); the host itself is ``10.R.255.254`` on the bridge, so it reaches every
machine and they reach each other. ``m.popen(i, cmd)`` runs a command inside machine ``i`` (its
network only: the file system, the users and the processes' view are the host's, as they are
for pods that share a node's disk). ``R`` is chosen among 10.200-10.254 where no route of the
host lies, so nothing outside is ever addressed.

Bridged frames cross the host's iptables FORWARD chain (``br_netfilter``: Docker sets
``bridge-nf-call-iptables`` and a FORWARD policy of DROP, which silently dropped every connection
between two namespaces here), so the bridge gets an ACCEPT rule of its own, commented with its tag.

Everything made is written first into a ledger under the rlsim home (``machines/<tag>.json``, with
the owner's pid) and undone on exit: the processes left in each namespace are killed, then the
namespaces, the bridge and the rule are removed. A ledger whose owner died (an interrupted test)
is undone by the next :func:`reap_abandoned`, and :func:`leftovers` names anything of ours still
there.
"""

from __future__ import annotations

import contextlib
import ipaddress
import json
import os
import secrets
import signal
import subprocess
import time
from pathlib import Path

from rlsim.files import read_file, write_file
from rlsim.host.home import home, private_dir
from rlsim.host.pids import pid_alive

PREFIX = "rlm"  # namespaces rlm-<tag>-<i>, bridge rlm<tag>b, host ends of the veths rlm<tag>v<i>
COMMENT = "rlsim-machines"
MAX_MACHINES = 32


class MachinesError(RuntimeError):
    """A namespace machine could not be made (not root, no ``ip``, no free subnet)."""


def _run(cmd: list[str]) -> subprocess.CompletedProcess:
    """``cmd``'s result; a missing program or a hang is a failed result (127, 124), so that an
    undo goes on with its other steps."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=30)
    except FileNotFoundError:
        return subprocess.CompletedProcess(cmd, 127, "", f"{cmd[0]}: not installed")
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, 124, "", f"{cmd[0]}: no answer in 30 s")


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = _run(["ip", *args])
    if check and out.returncode:
        raise MachinesError(f"ip {' '.join(args)}: {out.stderr.strip() or out.returncode}")
    return out


def _iptables(*args: str) -> subprocess.CompletedProcess:
    return _run(["iptables", "-w", *args])


def free_subnet(routes: str, first: int = 200) -> ipaddress.IPv4Network:
    """A 10.R.0.0/16 (R in 200..254, from ``first`` on, wrapping) that overlaps none of
    ``routes`` (``ip -4 route`` output)."""
    taken = []
    for line in routes.splitlines():
        word = line.split()[0] if line.split() else ""
        with contextlib.suppress(ValueError):
            taken.append(ipaddress.ip_network(word if word != "default" else "0.0.0.0/32",
                                              strict=False))
    for k in range(55):
        net = ipaddress.ip_network(f"10.{200 + (first - 200 + k) % 55}.0.0/16")
        if not any(net.overlaps(t) for t in taken if t.prefixlen > 0):
            return net
    raise MachinesError("no free 10.R.0.0/16 (R 200-254) on this host for namespace machines")


def _ledger_dir() -> Path:
    return private_dir(home() / "machines")


class NamespaceMachines:
    """``count`` namespace machines on one bridge (see the module text)."""

    def __init__(self, count: int) -> None:
        if not 1 <= count <= MAX_MACHINES:
            raise ValueError(f"namespace machines: count {count}: give 1 to {MAX_MACHINES}")
        self.count = count
        self.tag = secrets.token_hex(3)
        self.bridge = f"{PREFIX}{self.tag}b"
        self.subnet: ipaddress.IPv4Network | None = None
        self._ledger = _ledger_dir() / f"{self.tag}.json"

    def namespace(self, i: int) -> str:
        return f"{PREFIX}-{self.tag}-{i}"

    def address(self, i: int) -> str:
        """Machine ``i``'s address (its ``eth0``)."""
        assert self.subnet is not None, "not made yet"
        return str(self.subnet.network_address + (i << 8) + 1)

    @property
    def host_address(self) -> str:
        """The host's own address on the machines' network (the bridge's)."""
        assert self.subnet is not None, "not made yet"
        return str(self.subnet.broadcast_address - 1)

    def __enter__(self) -> NamespaceMachines:
        if os.geteuid() != 0:
            raise MachinesError("namespace machines need root (network namespaces, a bridge)")
        write_file(self._ledger, json.dumps({"pid": os.getpid(), "tag": self.tag,
                                             "count": self.count}))
        try:
            self._make()
        except BaseException:
            self.close()
            raise
        return self

    def _make(self) -> None:
        _ip("link", "add", self.bridge, "type", "bridge")
        # another set made at the same moment (another test, another user) may pick the same
        # subnet: whoever finds a second route to it after adding its own tries the next one
        for _ in range(5):
            self.subnet = free_subnet(_ip("-4", "route").stdout,
                                      first=200 + secrets.randbelow(55))
            _ip("addr", "add", f"{self.host_address}/16", "dev", self.bridge)
            _ip("link", "set", self.bridge, "up")
            routes = _ip("-4", "route", "show", str(self.subnet)).stdout.splitlines()
            if len(routes) <= 1:
                break
            _ip("addr", "del", f"{self.host_address}/16", "dev", self.bridge, check=False)
        else:
            raise MachinesError("namespace machines: no subnet stayed free (5 tries)")
        rule = forward_rule(self.bridge, self.tag)
        if _iptables("-I", "FORWARD", *rule).returncode:
            raise MachinesError(f"iptables -I FORWARD {' '.join(rule)} failed")
        for i in range(self.count):
            ns, outer = self.namespace(i), f"{PREFIX}{self.tag}v{i}"
            _ip("netns", "add", ns)
            _ip("link", "add", outer, "type", "veth", "peer", "name", "eth0", "netns", ns)
            _ip("link", "set", outer, "master", self.bridge, "up")
            _ip("-n", ns, "addr", "add", f"{self.address(i)}/16", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")

    def inside(self, i: int, cmd: list[str]) -> list[str]:
        """``cmd`` run inside machine ``i``: its network namespace only. Not `ip netns exec`,
        which also mounts a sysfs of the namespace's own over /sys and so hides the cgroup
        hierarchy a machine has (rlsim's nodes there found no cgroups)."""
        return ["nsenter", f"--net=/run/netns/{self.namespace(i)}", "--", *cmd]

    def popen(self, i: int, cmd: list[str], **kwargs) -> subprocess.Popen:
        """Start ``cmd`` inside machine ``i``."""
        return subprocess.Popen(self.inside(i, cmd), **kwargs)

    def run(self, i: int, cmd: list[str], **kwargs) -> subprocess.CompletedProcess:
        """Run ``cmd`` inside machine ``i`` to its end."""
        return subprocess.run(self.inside(i, cmd), **kwargs)

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        undo(self.tag)


def forward_rule(bridge: str, tag: str) -> list[str]:
    """The FORWARD rule that lets frames between a bridge's ports through."""
    return ["-i", bridge, "-o", bridge, "-m", "comment", "--comment", f"{COMMENT}:{tag}",
            "-j", "ACCEPT"]


def namespace_pids(ns: str) -> list[int]:
    out = _ip("netns", "pids", ns, check=False)
    return [int(p) for p in out.stdout.split() if p.isdigit()]


def undo(tag: str) -> list[str]:
    """Kill what runs in machines ``tag`` and remove their namespaces, bridge and rule; what was
    found and removed, in words. Safe to call again."""
    removed: list[str] = []
    prefix = f"{PREFIX}-{tag}-"
    for ns in _namespaces():
        if not ns.startswith(prefix):
            continue
        pids = namespace_pids(ns)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while namespace_pids(ns) and time.monotonic() < deadline:
            time.sleep(0.05)
        _ip("netns", "del", ns, check=False)
        removed.append(f"namespace {ns}" + (f" ({len(pids)} processes killed)" if pids else ""))
    bridge = f"{PREFIX}{tag}b"
    if _ip("link", "show", bridge, check=False).returncode == 0:
        _ip("link", "del", bridge, check=False)
        removed.append(f"bridge {bridge}")
    while _iptables("-D", "FORWARD", *forward_rule(bridge, tag)).returncode == 0:
        removed.append(f"FORWARD rule of {bridge}")
    with contextlib.suppress(FileNotFoundError):
        (_ledger_dir() / f"{tag}.json").unlink()
    return removed


def _namespaces() -> list[str]:
    out = _ip("netns", "list", check=False).stdout
    return [line.split()[0] for line in out.splitlines() if line.split()]


def leftovers() -> list[str]:
    """Namespaces, bridges and FORWARD rules of namespace machines still on this host."""
    found = [f"namespace {ns}" for ns in _namespaces() if ns.startswith(f"{PREFIX}-")]
    links = _ip("-o", "link", "show", "type", "bridge", check=False).stdout
    found += [f"bridge {w.rstrip(':')}" for line in links.splitlines()
              for w in line.split()[1:2] if w.startswith(PREFIX)]
    rules = _iptables("-S", "FORWARD").stdout
    found += [f"FORWARD rule: {line}" for line in rules.splitlines() if COMMENT in line]
    return found


def reap_abandoned() -> list[str]:
    """Undo the machines of every ledger whose owner is gone (an interrupted test or bench)."""
    removed: list[str] = []
    if not (home() / "machines").is_dir():
        return removed
    for path in sorted(_ledger_dir().glob("*.json")):
        try:
            entry = json.loads(read_file(path, 1 << 16))
            pid, tag = int(entry["pid"]), str(entry["tag"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if pid_alive(pid):
            continue
        removed += undo(tag)
    return removed
