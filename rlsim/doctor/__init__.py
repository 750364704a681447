"""``rlsim doctor``: pre-flight checks of a cluster, before a run spends GPU-hours finding out.

Asked from every node, by a probe process on that node
(:mod:`rlsim.doctor.probe`; local and docker nodes run it through the backend's node command, a real
cluster through rlsim's agent actor on each node):

- versions: Python, Ray, torch, DeepSpeed against the head's. Ray itself refuses another Ray or
  Python at join; another torch or DeepSpeed it lets in, to fail later inside a collective.
- ports: every node opens TCP to the head's GCS port and to every other node's node-manager and
  object-manager ports; a blocked one is named with the node pair and the port.
- checkpoint directory: every node writes a marker there, then every node lists the markers it
  sees. Storage that every node shares shows all of them everywhere; a node-local disk shows each
  node its own only, which no resume on another node survives.

Planning the probes and judging their answers are pure functions (:func:`plan_targets`,
:func:`diagnose`), tested as data; :func:`examine` runs them.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

# Whether a GCS answers at an address lives with the trainer, which asks it too before Ray's own
# minutes-long connect; the doctor, `rlsim plan` and the launchers' wait ask the same way
from rlsim.ray_internals import SUPPORTED_TEXT, version_problem
from rlsim.reach import gcs_silence, parse_address  # noqa: F401 - re-exported

VERSIONED = ("python", "ray", "torch", "deepspeed")


@dataclass(frozen=True)
class Finding:
    level: str  # "error": the run will fail; "warn": it will fail when something else does
    check: str  # "versions" | "ports" | "checkpoint_dir" | "probe"
    message: str
    fix: str

    def line(self) -> str:
        return f"{self.level}: {self.check}: {self.message}. Fix: {self.fix}"


@dataclass
class Report:
    endpoints: list[dict]
    looks: dict[int, dict] = field(default_factory=dict)
    seen: dict[int, list[int]] = field(default_factory=dict)
    findings: list[Finding] = field(default_factory=list)
    seconds: float = 0.0
    # rlsim's view of Ray: the installed release, its capabilities in force or not (and why),
    # and the auth mode the cluster's GCS enforces, asked of the GCS itself
    ray: dict = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not any(f.level == "error" for f in self.findings)

    def record(self) -> dict:
        """``rlsim doctor --json``: the nodes as probed and the findings."""
        nodes = []
        for ep in self.endpoints:
            look = self.looks.get(ep["index"], {})
            reach = look.get("reach", [])
            nodes.append({"index": ep["index"], "address": ep["address"], "host": look.get("host"),
                          "error": look.get("error"), "versions": look.get("versions", {}),
                          "hardware": look.get("hardware", {}),
                          "reaches": f"{sum(r['ok'] for r in reach)}/{len(reach)}"})
        return {"nodes": nodes, "ok": self.ok, "seconds": self.seconds, "ray": self.ray,
                "findings": [{"level": f.level, "check": f.check, "message": f.message,
                              "fix": f.fix} for f in self.findings]}


def _name(ep: dict) -> str:
    return f"node {ep['index']} ({ep['address']})"


def plan_targets(endpoints: list[dict]) -> dict[int, list[dict]]:
    """Node index -> the (address, port) pairs it must reach: every other node's ports."""
    return {src["index"]: [{"node": dst["index"], "address": dst["address"], "port": port,
                            "name": name}
                           for dst in endpoints if dst["index"] != src["index"]
                           for name, port in dst["ports"].items()]
            for src in endpoints}


def diagnose(endpoints: list[dict], looks: dict[int, dict], seen: dict[int, list[int]],
             checkpoint_dir: str | None) -> list[Finding]:
    """Findings from the probes' answers (``looks``: phase ``look`` per node, or ``{"error"}``;
    ``seen``: the checkpoint markers each node lists)."""
    by_index = {ep["index"]: ep for ep in endpoints}
    findings = [Finding("error", "probe", f"{_name(by_index[i])} did not answer: {look['error']}",
                        "check the node is up and runs this environment (rlsim status)")
                for i, look in sorted(looks.items()) if "error" in look]
    answered = {i: look for i, look in sorted(looks.items()) if "error" not in look}
    findings += _versions(by_index, answered)
    findings += _ports(by_index, answered)
    if checkpoint_dir:
        findings += _storage(by_index, answered, seen, checkpoint_dir)
    return findings


def _versions(by_index: dict[int, dict], looks: dict[int, dict]) -> list[Finding]:
    if 0 not in looks:
        return []
    head = looks[0]["versions"]
    out = []
    if head.get("ray") and (outside := version_problem(str(head["ray"]))):
        out.append(Finding("warn", "ray_version", f"the cluster runs {outside}",
                           f"use a Ray release in {SUPPORTED_TEXT}, or run `python "
                           "ci/ray_matrix.py --releases <yours>` from rlsim's repository to "
                           "prove this one"))
    for i, look in looks.items():
        differ = [f"{k} {look['versions'].get(k)} (head: {head.get(k)})" for k in VERSIONED
                  if look["versions"].get(k) != head.get(k)]
        if differ:
            out.append(Finding("error", "versions", f"{_name(by_index[i])} has "
                               + ", ".join(differ),
                               "build every node from one image: the same Python, Ray, torch "
                               "and DeepSpeed everywhere"))
    return out


def _ports(by_index: dict[int, dict], looks: dict[int, dict]) -> list[Finding]:
    out = []
    for i, look in looks.items():
        for r in look.get("reach", []):
            if r["ok"]:
                continue
            dst = by_index[r["node"]]
            fix = (f"allow TCP {r['port']} from every node to the head (firewall, security "
                   "group)" if r["name"] == "gcs" else
                   "allow Ray's node ports between all nodes (node manager, object manager and "
                   "the worker port range)")
            out.append(Finding("error", "ports", f"{_name(by_index[i])} cannot reach "
                               f"{_name(dst)} port {r['port']} ({r['name']}): {r.get('error')}",
                               fix))
    return out


def _storage(by_index: dict[int, dict], looks: dict[int, dict], seen: dict[int, list[int]],
             checkpoint_dir: str) -> list[Finding]:
    out = [Finding("error", "checkpoint_dir", f"{_name(by_index[i])} cannot write "
                   f"{checkpoint_dir}: {look['write_error']}",
                   "mount the checkpoint directory writable on every node")
           for i, look in looks.items() if "write_error" in look]
    wrote = sorted(i for i, look in looks.items() if "write_error" not in look)
    out += [Finding("error", "probe", f"{_name(by_index[i])} did not list {checkpoint_dir}",
                    "check the node is up and runs this environment (rlsim status)")
            for i in wrote if i not in seen]
    views = {i: sorted(set(seen[i]) & set(wrote)) for i in wrote if i in seen}
    blind = {i: v for i, v in views.items() if v != wrote}
    if blind:
        detail = "; ".join(f"node {i} sees the files of node(s) {', '.join(map(str, v)) or 'none'}"
                           for i, v in sorted(blind.items()))
        out.append(Finding("warn", "checkpoint_dir",
                           f"{checkpoint_dir} is node-local: a file written there on one node is "
                           f"not seen on the others ({detail}); a resume after losing a node "
                           "will find no complete checkpoint",
                           "put the checkpoint directory on storage every node mounts at the "
                           "same path (NFS, a shared volume)"))
    return out


def examine(cluster, checkpoint_dir: str | None = None) -> Report:
    """Probe every node of ``cluster`` (a started rlsim cluster or a RealCluster) and judge."""
    t0 = time.monotonic()
    report = Report(cluster.endpoints())
    indices = [ep["index"] for ep in report.endpoints]
    targets = plan_targets(report.endpoints)
    base = {"dir": checkpoint_dir, "nonce": uuid.uuid4().hex[:8]}

    def each(ask, phase: str, extra=lambda i: {}) -> dict[int, dict]:
        def one(i: int) -> dict:
            try:
                return ask(i, phase, {**base, "index": i, **extra(i)})
            except Exception as e:  # noqa: BLE001 - a node that cannot answer is a finding
                return {"error": str(e).strip().splitlines()[-1][:300] if str(e) else repr(e)}

        with ThreadPoolExecutor(max_workers=len(indices)) as pool:
            return dict(zip(indices, pool.map(one, indices), strict=True))

    address = {ep["index"]: ep["address"] for ep in report.endpoints}
    with cluster.probes() as ask:
        report.looks = each(ask, "look", lambda i: {"targets": targets[i], "address": address[i]})
        if checkpoint_dir:
            report.seen = {i: r["seen"] for i, r in each(ask, "seen").items() if "seen" in r}
            each(ask, "clean")
    report.findings = diagnose(report.endpoints, report.looks, report.seen, checkpoint_dir)
    report.ray = ray_view(cluster)
    report.seconds = round(time.monotonic() - t0, 3)
    return report


def ray_view(cluster) -> dict:
    """What this process's Ray offers rlsim (:func:`rlsim.ray_internals.summary`) and
    the auth mode ``cluster``'s GCS enforces, read from the GCS (a question without a token)."""
    from rlsim import ray_internals
    from rlsim.backends.base import ReportsRay
    from rlsim.ray_internals.gcs import auth_in_force

    try:
        if isinstance(cluster, ReportsRay):
            return cluster.ray_report()
        return {**ray_internals.summary(), "auth": auth_in_force(cluster.address)}
    except Exception as e:  # noqa: BLE001 - the doctor's findings stand without this view
        return {**ray_internals.summary(), "error": f"{type(e).__name__}: {e}"[:300]}


# ---- reaching a cluster rlsim did not start ----------------------------------------------------


@contextlib.contextmanager
def connecting(address: str, timeout_s: float) -> Iterator[None]:
    """While inside: Ctrl-C or SIGTERM end the process at once (exit 128 + the signal), and so
    does ``timeout_s`` passing (exit 2), each with one line naming ``address``.

    Ray connects inside C++, where Python's own signal handlers do not run until it gives up
    (minutes): here the signals are blocked in this thread (and the threads Ray starts meanwhile)
    and a watcher thread takes them instead. Must be entered from the main thread.
    """
    sigs = {signal.SIGINT, signal.SIGTERM}
    done = threading.Event()
    old = signal.pthread_sigmask(signal.SIG_BLOCK, sigs)

    def watch() -> None:
        deadline = time.monotonic() + timeout_s
        while not done.is_set():
            got = signal.sigtimedwait(sigs, 0.1)
            if got is not None:
                _leave(f"stopped by {signal.Signals(got.si_signo).name} while connecting to "
                       f"the Ray cluster at {address}", 128 + got.si_signo)
            if time.monotonic() > deadline and not done.is_set():
                _leave(f"the Ray cluster at {address} did not let rlsim connect within "
                       f"{timeout_s:g} s. Fix: check the address is the head's GCS (ray status "
                       "--address on the head) and that its auth settings are in the environment",
                       2)

    watcher = threading.Thread(target=watch, name="doctor-connect-watch", daemon=True)
    watcher.start()
    try:
        yield
    finally:
        done.set()
        watcher.join()
        signal.pthread_sigmask(signal.SIG_SETMASK, old)  # a signal still pending lands now


def _leave(message: str, code: int) -> None:
    print(f"rlsim doctor: {message}", file=sys.stderr, flush=True)
    os._exit(code)

