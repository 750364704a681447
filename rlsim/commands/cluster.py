"""``rlsim cluster``, ``status`` and ``down``: start, inspect and stop simulated clusters."""

from __future__ import annotations

import json
import signal
import time
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.table import Table

from rlsim.backends import DEFAULT, attach, chosen, cluster_class, described, unknown
from rlsim.backends.base import ClusterStartError, NodeInfo
from rlsim.backends.reaper import reap, reap_abandoned, reap_corrupt, reap_orphans
from rlsim.commands.console import check_name, console, err, fail, no_such, styled
from rlsim.host import iptables, procs, state
from rlsim.host.home import HomeError
from rlsim.host.shape import NODE_TYPES, NodeShape
from rlsim.host.spec import ClusterShape, ClusterSpec, HealthChecks
from rlsim.reach import substrate_problem


def table(cluster, nodes: list[NodeInfo]) -> Table:
    st = cluster.state
    assert st is not None  # only called on a running cluster
    table = Table(title=f"rlsim cluster {st.spec.name!r} ({cluster.name} backend, slot {st.slot})")
    pid_col = cluster.pid_label
    for col in ("node", "role", "address", "GPUs", "shape", "alive", "pids", pid_col):
        table.add_column(col, justify="right" if col in ("node", "GPUs", "pids") else "left")
    for n in nodes:
        table.add_row(
            str(n.index), n.role, n.address, str(n.gpus), n.shape(),
            "yes" if n.alive else styled(("no", "red")),
            str(len(n.pids)), str(st.pids.get(n.index, n.pids[0] if n.pids else "-")),
        )
    return table


def print_connect(cluster) -> None:
    h = cluster.spec.health
    for hint in cluster.connect_hints():
        console.print(f"# {hint}")
    for key, value in cluster.driver_env().items():
        console.print(f"export {key}={value}")
    console.print(f"# dashboard and Jobs API: {cluster.dashboard_url}")
    console.print(
        f"# health checks tuned for fast failure detection: period {h.period_ms} ms, timeout "
        f"{h.timeout_ms} ms, {h.failure_threshold} failures (Ray defaults: 3000 ms, 10000 ms, 5)"
    )


def to_spec(command: str, options: dict[str, str], **fields) -> ClusterSpec:
    """A ClusterSpec from command-line options; a bad value exits 2 naming its option."""
    try:
        return ClusterSpec(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        why = first["msg"].removeprefix("Value error, ")
        if not field:  # options that do not fit together: the message names them and the fix
            raise fail(f"rlsim {command}: {why}", 2) from None
        option, value = options.get(field, field), fields.get(field)
        if field == "node" and len(first["loc"]) > 2:  # one node's field: --node I:KEY=VALUE
            index, key = first["loc"][1:3]
            value = f"{index}:{key}={value[index].get(key)}"
        raise fail(f"rlsim {command}: {option} {value!s}: {why}; fix: give "
                    f"{option} another value", 2) from None


def start_cluster(spec: ClusterSpec, detached: bool, backend: str = DEFAULT,
                  on: str | None = None):
    try:
        with console.status(f"starting {spec.nodes} nodes, {spec.gpus()} fake GPUs"):
            cls = cluster_class(chosen(backend, on))
            return cls.make(spec, on=on, detached=detached).start()
    except HomeError as e:
        raise fail(f"rlsim cluster: {e}", 2) from None
    except (ClusterStartError, TimeoutError, RuntimeError) as e:
        err.print(f"rlsim cluster: {e}", style="red")
        raise typer.Exit(1) from e

_CLUSTER_OPTIONS = {"name": "--name", "nodes": "--nodes", "gpus_per_node": "--fake-gpus",
                    "gpu_memory_gb": "--gpu-memory-gb", "cpus_per_node": "--cpus-per-node",
                    "memory_gb": "--memory-gb", "accelerator": "--accelerator",
                    "resources": "--resources", "labels": "--label", "like": "--like",
                    "node": "--node", "ready_timeout_s": "--ready-timeout",
                    "cuda_devices": "--cuda-devices", "cuda_standin": "--cuda-standin"}


def _resources(text: str | None) -> dict:
    """``--resources '{"name": n}'`` as ``ray start`` takes it; exits 2 naming the fix."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise fail(f"rlsim cluster: --resources {text}: not JSON ({e.msg}); fix: give an "
                    """object of names and amounts, e.g. --resources '{"ssd": 1}'""", 2) from None
    if not isinstance(value, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()):
        raise fail(f"rlsim cluster: --resources {text}: not an object of names and numbers; "
                    """fix: e.g. --resources '{"ssd": 1}'""", 2)
    return value


def _labels(pairs: list[str]) -> dict[str, str]:
    """``--label k=v`` (repeatable) as a dict; exits 2 naming the fix."""
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise fail(f"rlsim cluster: --label {pair}: write it as KEY=VALUE, e.g. "
                        "--label zone=us-east-1a", 2)
        labels[key] = value
    return labels


def _nodes(options: list[str]) -> dict[int, dict[str, str]]:
    """``--node I:KEY=VALUE[,KEY=VALUE...]`` (repeatable) as the ``node`` field's dict (values
    are checked there); exits 2 naming the fix."""
    nodes: dict[int, dict[str, str]] = {}
    for option in options:
        index, sep, pairs = option.partition(":")
        fields: dict[str, str] = {}
        key = None
        for part in pairs.split(","):
            if "=" not in part and key == "cuda_devices":  # its own list: cuda_devices=0,1
                fields[key] += "," + part
                continue
            key, _, value = part.partition("=")
            fields[key] = value
        if not sep or not index.isdigit() or not all(fields) or "" in fields.values():
            raise fail(f"rlsim cluster: --node {option}: write it as I:KEY=VALUE[,KEY=VALUE], "
                        "e.g. --node 3:gpus=4,accelerator=A100", 2)
        if unknown := set(fields) - (set(NodeShape.model_fields) - {"resources", "labels"}):
            raise fail(f"rlsim cluster: --node {option}: no key {sorted(unknown)[0]!r}; fix: "
                        "use like, gpus, gpu_memory_gb, cpus, memory_gb, accelerator or "
                        "cuda_devices", 2)
        nodes.setdefault(int(index), {}).update(fields)
    return nodes


def default(field: str):
    """A cluster-shape field's default: the CLI, the fixture and scenarios share one."""
    return ClusterShape.model_fields[field].default


def cluster(
    nodes: int = typer.Option(default("nodes"), "--nodes", "-n", help="Nodes, head included."),
    fake_gpus: int | None = typer.Option(
        None, "--fake-gpus", "-g", show_default=False,
        help=f"GPUs each node advertises [default: {default('gpus_per_node')}]."),
    gpu_memory_gb: float | None = typer.Option(
        None, show_default=False,
        help=f"GiB of each fake GPU (OOM ledger) [default: {default('gpu_memory_gb'):g}]."),
    cpus_per_node: int | None = typer.Option(
        None, show_default=False,
        help=f"Logical CPUs each node advertises [default: {default('cpus_per_node')}]."),
    memory_gb: float | None = typer.Option(None, help="GiB of Ray's memory resource each node "
                                           "advertises (default: Ray's estimate from the host's "
                                           "memory, the same on every node)."),
    accelerator: str | None = typer.Option(None, help="Accelerator type each node reports, as "
                                           "Ray does on real GPU nodes (e.g. H100, A100-80G)."),
    cuda_devices: str | None = typer.Option(
        None, help="The host's real GPUs behind the nodes' GPUs, as CUDA_VISIBLE_DEVICES lists "
        "them (e.g. 0 or 0,1): a node's GPU j is device j mod their number, so one real GPU can "
        "stand behind every node's GPUs. Default: fake GPUs (the CPU)."),
    cuda_standin: bool = typer.Option(
        False, "--cuda-standin", help="torch in the nodes' processes sees their fake GPUs as CUDA "
        "devices in host memory (the device stand-in): frameworks with no CPU path run."),
    resources: str | None = typer.Option(None, help="Custom resources each node advertises, "
                                         """as JSON: '{"ssd": 1}'."""),
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="KEY=VALUE label on each node (repeatable).")] = None,
    like: str | None = typer.Option(
        None, help="Shape every node like a real node type: its GPUs, GPU memory, accelerator "
        f"type, CPUs and memory; the options above win ({', '.join(NODE_TYPES)})."),
    node: Annotated[list[str] | None, typer.Option(
        "--node", help="One node's own shape, I:KEY=VALUE[,KEY=VALUE...] with keys like, gpus, "
        "gpu_memory_gb, cpus, memory_gb, accelerator, cuda_devices (repeatable), e.g. "
        "--node 3:gpus=4,accelerator=A100,gpu_memory_gb=40.")] = None,
    name: str = typer.Option("rlsim", help="Cluster name (for status/down)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Leave it running and return."),
    ready_timeout: float = typer.Option(default("ready_timeout_s"),
                                        help="Seconds each node may take to join."),
    backend: str = typer.Option(DEFAULT, help=f"One of: {described(starts=True)}."),
    on: str | None = typer.Option(
        None, "--on", metavar="RAY_ADDRESS",
        help="Spread the nodes over the machines of a plain Ray cluster of CPU machines (its "
        "GCS at HOST:PORT), node i on machine i % machines; the cluster ends with this "
        "command, or with `rlsim down` where --detach."),
) -> None:
    """Start a real Ray cluster whose nodes are local processes on their own 127.x addresses
    (or Docker containers on a network of their own: --backend docker).
    Exit 0: stopped by Ctrl-C, or detached; 1: the cluster did not start; 2: a bad option."""
    if problem := unknown(backend, starts=True):
        raise fail(f"rlsim cluster: {problem} (rlsim cluster starts the nodes itself)", 2)
    if on is not None and backend != DEFAULT:
        raise fail(f"rlsim cluster: --on {on} with --backend {backend}: a cluster on a "
                   "substrate runs its nodes as processes on the substrate's machines; fix: "
                   "drop --backend", 2)
    if on is not None and (found := substrate_problem(on)):  # before any socket: no traceback
        raise fail(f"rlsim cluster: --on {found}; fix: give the substrate's GCS address as "
                   "HOST:PORT, e.g. --on 10.0.0.1:6379", 2)
    given = {"gpus_per_node": fake_gpus, "gpu_memory_gb": gpu_memory_gb,
             "cpus_per_node": cpus_per_node, "memory_gb": memory_gb, "accelerator": accelerator,
             "like": like, "cuda_devices": cuda_devices, "cuda_standin": cuda_standin or None}
    spec = to_spec(
        "cluster", _CLUSTER_OPTIONS,
        name=name, nodes=nodes, resources=_resources(resources), labels=_labels(label or []),
        node=_nodes(node or []), ready_timeout_s=ready_timeout, health=HealthChecks(),
        **{k: v for k, v in given.items() if v is not None},
    )
    from rlsim.backends.base import standin_refusal

    if refused := standin_refusal(spec, local=chosen(backend, on) == DEFAULT):
        raise fail(f"rlsim cluster: --cuda-standin: {refused}", 2)
    c = start_cluster(spec, detach, backend, on)
    try:  # a Ctrl-C from here on stops it, even one landing before the wait (seen once)
        console.print(table(c, c.ready_nodes))
        console.print(f"ready in {c.timings['ready_s']:.1f} s")
        print_connect(c)
        if detach:
            console.print(f"# detached: `rlsim status {name}`, `rlsim down {name}`")
            return
        console.print("# Ctrl-C (or SIGTERM) tears the cluster down")
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        if not detach:
            c.stop()
            console.print(f"cluster {name!r} stopped")


def attach_named(name: str):
    st = state.load(name)
    if st is None:
        raise LookupError(f"no rlsim cluster named {name!r} (see `rlsim status`)")
    return attach(st)


def _faults(st: state.ClusterState) -> list[dict]:
    """The faults put in by hand (``rlsim fault``) still in force on ``st``."""
    from rlsim.faults.ledger import ledger

    return [{k: e.get(k) for k in ("id", "action", "nodes", "params", "since", "until")}
            for e in ledger(st)]


def _corrupt_line(c: state.Corrupt) -> str:
    return f"{c.name}: corrupt state file {c.path} ({c.reason}); fix: {c.fix}"


def status(
    name: str | None = typer.Argument(None, help="One cluster; all if omitted."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show running rlsim clusters and Ray's view of their nodes (a state file that does not parse
    is shown as corrupt, with its path and the fix).
    Exit 0: shown; 2: a bad name or no such cluster."""
    if name is not None:
        check_name(name, "status")
    entries = state.scan()
    if name is not None:
        entries = [e for e in entries if _entry_name(e) == name]
        if not entries:
            raise no_such("status", name)
    live = procs.sessions()
    out = []
    for entry in entries:
        if isinstance(entry, state.Corrupt):
            out.append({"name": entry.name, "corrupt": str(entry.path), "reason": entry.reason,
                        "fix": entry.fix})
            if not as_json:
                err.print(_corrupt_line(entry), style="red", markup=False, highlight=False,
                          soft_wrap=True)
            continue
        try:
            c = attach(entry)
        except LookupError as e:  # a cluster on a substrate: its owner alone sees its nodes
            out.append({"name": entry.spec.name, "backend": entry.backend, "slot": entry.slot,
                        "session": entry.session, "owner_pid": entry.owner_pid,
                        "note": str(e)})
            if not as_json:
                console.print(f"{entry.spec.name}: {e}", markup=False, highlight=False,
                              soft_wrap=True)
            continue
        nodes = c.nodes()
        gone = state.is_abandoned(entry, live)
        try:
            in_force, ledger_error = _faults(entry), None
        except ValueError as e:  # the ledger does not parse: said, with the way out
            in_force, ledger_error = [], str(e)
        out.append(
            {
                "name": entry.spec.name,
                "backend": c.name,
                "slot": entry.slot,
                "session": entry.session,
                "address": c.address,
                "dashboard": c.dashboard_url,
                "abandoned": gone,
                "faults": in_force,
                **({"faults_error": ledger_error} if ledger_error else {}),
                "nodes": [
                    {"index": x.index, "role": x.role, "address": x.address, "alive": x.alive,
                     "gpus": x.gpus, "pids": len(x.pids), "shape": x.shape(),
                     "resources": x.resources, "labels": x.labels}
                    for x in nodes
                ],
            }
        )
        if not as_json:
            console.print(table(c, nodes))
            for f in out[-1]["faults"]:
                heals = f" (heals itself in {max(0, f['until'] - time.time()):.0f} s)" \
                    if f["until"] else ""
                shown = " ".join(f"{k}={v}" for k, v in f["params"].items())
                console.print(f"fault in force: #{f['id']} {f['action']} {shown}{heals}; heal: "
                              f"rlsim fault {entry.spec.name} heal", markup=False,
                              highlight=False, soft_wrap=True)
            if ledger_error:
                err.print(ledger_error, style="red", markup=False, highlight=False,
                          soft_wrap=True)
            print_connect(c)
            if gone:
                err.print(f"{entry.spec.name}: abandoned (its owner, pid {entry.owner_pid}, is "
                          f"gone); fix: `rlsim down {entry.spec.name}` (starting any cluster "
                          "also reaps it)", style="yellow", markup=False, highlight=False,
                          soft_wrap=True)
    if as_json:
        print(json.dumps(out, indent=2))
    elif not out:
        console.print("no rlsim clusters are running")


def _entry_name(entry: state.ClusterState | state.Corrupt) -> str:
    return entry.name if isinstance(entry, state.Corrupt) else entry.spec.name


def down(
    name: str | None = typer.Argument(None, help="The cluster to stop."),
    all_: bool = typer.Option(False, "--all", help="Stop every rlsim cluster and reap leftovers."),
) -> None:
    """Stop a cluster: kill exactly its processes, remove its rules, cgroups and state (a corrupt
    state file: remove it and what it still names).
    Exit 0: stopped; 1: something survived; 2: a bad name, no such cluster, or no name where
    several run."""
    if name is not None:
        check_name(name, "down")
    entries = state.scan()
    if all_:
        targets = entries
    elif name:
        targets = [e for e in entries if _entry_name(e) == name]
        if not targets:
            raise no_such("down", name)
    elif len(entries) == 1:
        targets = entries
    else:
        raise fail(f"rlsim down: name one cluster or give --all: running "
                    f"{[_entry_name(e) for e in entries]}", 2)
    try:
        for entry in targets:
            if isinstance(entry, state.Corrupt):
                reap_corrupt(entry)
                console.print(f"removed corrupt state file {entry.path}", highlight=False)
            else:
                reap(entry)
                console.print(f"stopped {entry.spec.name!r}", highlight=False)
        reap_abandoned()
    except (TimeoutError, RuntimeError) as e:  # a cluster that could not be ended: said why
        raise fail(f"rlsim down: {e}", 1) from None
    if all_:
        for chain in iptables.rlsim_chains():
            iptables.heal_chain(chain)

        for thing in reap_orphans({s.session for s in state.load_all()}):
            console.print(f"removed {thing}")
