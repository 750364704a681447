"""The ``rlsim`` command line: start, inspect and stop simulated clusters."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from rlsim.backends import attach, cluster_class
from rlsim.backends.base import ClusterStartError, NodeInfo
from rlsim.backends.local import LocalCluster
from rlsim.backends.reaper import reap, reap_abandoned, reap_corrupt, reap_orphans
from rlsim.host import iptables, procs, state
from rlsim.host.home import HomeError
from rlsim.host.shape import NODE_TYPES, NodeShape
from rlsim.host.spec import ClusterShape, ClusterSpec, HealthChecks, name_problem

app = typer.Typer(no_args_is_help=True, add_completion=False, help=__doc__)
console = Console()
err = Console(stderr=True)


def _table(cluster: LocalCluster, nodes: list[NodeInfo]) -> Table:
    st = cluster.state
    assert st is not None  # only called on a running cluster
    table = Table(title=f"rlsim cluster {st.spec.name!r} ({cluster.name} backend, slot {st.slot})")
    pid_col = cluster.pid_label
    for col in ("node", "role", "address", "GPUs", "shape", "alive", "pids", pid_col):
        table.add_column(col, justify="right" if col in ("node", "GPUs", "pids") else "left")
    for n in nodes:
        table.add_row(
            str(n.index), n.role, n.address, str(n.gpus), n.shape(),
            "yes" if n.alive else "[red]no[/red]",
            str(len(n.pids)), str(st.pids.get(n.index, n.pids[0] if n.pids else "-")),
        )
    return table


def _print_connect(cluster: LocalCluster) -> None:
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


def _fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as one line on stderr (never read as markup) and return the exit."""
    err.print(message, style="red", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def _spec(command: str, options: dict[str, str], **fields) -> ClusterSpec:
    """A ClusterSpec from command-line options; a bad value exits 2 naming its option."""
    try:
        return ClusterSpec(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        why = first["msg"].removeprefix("Value error, ")
        if not field:  # options that do not fit together: the message names them and the fix
            raise _fail(f"rlsim {command}: {why}", 2) from None
        option, value = options.get(field, field), fields.get(field)
        if field == "node" and len(first["loc"]) > 2:  # one node's field: --node I:KEY=VALUE
            index, key = first["loc"][1:3]
            value = f"{index}:{key}={value[index].get(key)}"
        raise _fail(f"rlsim {command}: {option} {value!s}: {why}; fix: give "
                    f"{option} another value", 2) from None


def _check_name(name: str, command: str) -> None:
    problem = name_problem(name)
    if problem:
        raise _fail(f"rlsim {command}: {problem}; fix: name a cluster from `rlsim status`", 2)


def _start(spec: ClusterSpec, detached: bool, backend: str = "local") -> LocalCluster:
    try:
        with console.status(f"starting {spec.nodes} nodes, {spec.gpus()} fake GPUs"):
            return cluster_class(backend)(spec, detached=detached).start()
    except HomeError as e:
        raise _fail(f"rlsim cluster: {e}", 2) from None
    except (ClusterStartError, TimeoutError, RuntimeError) as e:
        err.print(f"[red]rlsim cluster: {e}[/red]")
        raise typer.Exit(1) from e


_CLUSTER_OPTIONS = {"name": "--name", "nodes": "--nodes", "gpus_per_node": "--fake-gpus",
                    "gpu_memory_gb": "--gpu-memory-gb", "cpus_per_node": "--cpus-per-node",
                    "memory_gb": "--memory-gb", "accelerator": "--accelerator",
                    "resources": "--resources", "labels": "--label", "like": "--like",
                    "node": "--node", "ready_timeout_s": "--ready-timeout"}


def _resources(text: str | None) -> dict:
    """``--resources '{"name": n}'`` as ``ray start`` takes it; exits 2 naming the fix."""
    if text is None:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise _fail(f"rlsim cluster: --resources {text}: not JSON ({e.msg}); fix: give an "
                    """object of names and amounts, e.g. --resources '{"ssd": 1}'""", 2) from None
    if not isinstance(value, dict) or not all(
            isinstance(v, int | float) and not isinstance(v, bool) for v in value.values()):
        raise _fail(f"rlsim cluster: --resources {text}: not an object of names and numbers; "
                    """fix: e.g. --resources '{"ssd": 1}'""", 2)
    return value


def _labels(pairs: list[str]) -> dict[str, str]:
    """``--label k=v`` (repeatable) as a dict; exits 2 naming the fix."""
    labels = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise _fail(f"rlsim cluster: --label {pair}: write it as KEY=VALUE, e.g. "
                        "--label zone=us-east-1a", 2)
        labels[key] = value
    return labels


def _nodes(options: list[str]) -> dict[int, dict[str, str]]:
    """``--node I:KEY=VALUE[,KEY=VALUE...]`` (repeatable) as the ``node`` field's dict (values
    are checked there); exits 2 naming the fix."""
    nodes: dict[int, dict[str, str]] = {}
    for option in options:
        index, sep, pairs = option.partition(":")
        fields = dict(pair.partition("=")[::2] for pair in pairs.split(","))
        if not sep or not index.isdigit() or not all(fields) or "" in fields.values():
            raise _fail(f"rlsim cluster: --node {option}: write it as I:KEY=VALUE[,KEY=VALUE], "
                        "e.g. --node 3:gpus=4,accelerator=A100", 2)
        if unknown := set(fields) - (set(NodeShape.model_fields) - {"resources", "labels"}):
            raise _fail(f"rlsim cluster: --node {option}: no key {sorted(unknown)[0]!r}; fix: "
                        "use like, gpus, gpu_memory_gb, cpus, memory_gb or accelerator", 2)
        nodes.setdefault(int(index), {}).update(fields)
    return nodes


def _default(field: str):
    """A cluster-shape field's default: the CLI, the fixture and scenarios share one."""
    return ClusterShape.model_fields[field].default


@app.command()
def cluster(
    nodes: int = typer.Option(_default("nodes"), "--nodes", "-n", help="Nodes, head included."),
    fake_gpus: int | None = typer.Option(
        None, "--fake-gpus", "-g", show_default=False,
        help=f"GPUs each node advertises [default: {_default('gpus_per_node')}]."),
    gpu_memory_gb: float | None = typer.Option(
        None, show_default=False,
        help=f"GiB of each fake GPU (OOM ledger) [default: {_default('gpu_memory_gb'):g}]."),
    cpus_per_node: int | None = typer.Option(
        None, show_default=False,
        help=f"Logical CPUs each node advertises [default: {_default('cpus_per_node')}]."),
    memory_gb: float | None = typer.Option(None, help="GiB of Ray's memory resource each node "
                                           "advertises (default: Ray's estimate from the host's "
                                           "memory, the same on every node)."),
    accelerator: str | None = typer.Option(None, help="Accelerator type each node reports, as "
                                           "Ray does on real GPU nodes (e.g. H100, A100-80G)."),
    resources: str | None = typer.Option(None, help="Custom resources each node advertises, "
                                         """as JSON: '{"ssd": 1}'."""),
    label: Annotated[list[str] | None, typer.Option(
        "--label", help="KEY=VALUE label on each node (repeatable).")] = None,
    like: str | None = typer.Option(
        None, help="Shape every node like a real node type: its GPUs, GPU memory, accelerator "
        f"type, CPUs and memory; the options above win ({', '.join(NODE_TYPES)})."),
    node: Annotated[list[str] | None, typer.Option(
        "--node", help="One node's own shape, I:KEY=VALUE[,KEY=VALUE...] with keys like, gpus, "
        "gpu_memory_gb, cpus, memory_gb, accelerator (repeatable), e.g. "
        "--node 3:gpus=4,accelerator=A100,gpu_memory_gb=40.")] = None,
    name: str = typer.Option("rlsim", help="Cluster name (for status/down)."),
    detach: bool = typer.Option(False, "--detach", "-d", help="Leave it running and return."),
    ready_timeout: float = typer.Option(_default("ready_timeout_s"),
                                        help="Seconds each node may take to join."),
    backend: str = typer.Option("local", help="local (processes on 127.x addresses) or docker "
                                "(one container per node)"),
) -> None:
    """Start a real Ray cluster whose nodes are local processes on their own 127.x addresses
    (or Docker containers on a network of their own: --backend docker).
    Exit 0: stopped by Ctrl-C, or detached; 1: the cluster did not start; 2: a bad option."""
    if backend not in ("local", "docker"):
        raise _fail(f"rlsim cluster: --backend {backend}: rlsim cluster starts local or docker "
                    "nodes; fix: --backend local or --backend docker", 2)
    given = {"gpus_per_node": fake_gpus, "gpu_memory_gb": gpu_memory_gb,
             "cpus_per_node": cpus_per_node, "memory_gb": memory_gb, "accelerator": accelerator,
             "like": like}
    spec = _spec(
        "cluster", _CLUSTER_OPTIONS,
        name=name, nodes=nodes, resources=_resources(resources), labels=_labels(label or []),
        node=_nodes(node or []), ready_timeout_s=ready_timeout, health=HealthChecks(),
        **{k: v for k, v in given.items() if v is not None},
    )
    c = _start(spec, detach, backend)
    console.print(_table(c, c.nodes()))
    console.print(f"ready in {c.timings['ready_s']:.1f} s")
    _print_connect(c)
    if detach:
        console.print(f"# detached: `rlsim status {name}`, `rlsim down {name}`")
        return
    console.print("# Ctrl-C (or SIGTERM) tears the cluster down")
    try:
        while True:
            signal.pause()
    except KeyboardInterrupt:
        pass
    finally:
        c.stop()
        console.print(f"cluster {name!r} stopped")


def _attach(name: str):
    st = state.load(name)
    if st is None:
        raise LookupError(f"no rlsim cluster named {name!r} (see `rlsim status`)")
    return attach(st)


def _no_such(command: str, name: str) -> typer.Exit:
    return _fail(f"rlsim {command}: no rlsim cluster named {name!r}; fix: name one from "
                 "`rlsim status`", 2)


def _faults(st: state.ClusterState) -> list[dict]:
    """The faults put in by hand (``rlsim fault``) still in force on ``st``."""
    from rlsim.faults.by_hand import ledger

    return [{k: e.get(k) for k in ("id", "action", "nodes", "port", "from", "since", "until")}
            for e in ledger(st)]


def _corrupt_line(c: state.Corrupt) -> str:
    return f"{c.name}: corrupt state file {c.path} ({c.reason}); fix: {c.fix}"


@app.command()
def status(
    name: str | None = typer.Argument(None, help="One cluster; all if omitted."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
) -> None:
    """Show running rlsim clusters and Ray's view of their nodes (a state file that does not parse
    is shown as corrupt, with its path and the fix).
    Exit 0: shown; 2: a bad name or no such cluster."""
    if name is not None:
        _check_name(name, "status")
    entries = state.scan()
    if name is not None:
        entries = [e for e in entries if _entry_name(e) == name]
        if not entries:
            raise _no_such("status", name)
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
        c = attach(entry)
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
            console.print(_table(c, nodes))
            for f in out[-1]["faults"]:
                heals = f" (heals itself in {max(0, f['until'] - time.time()):.0f} s)" \
                    if f["until"] else ""
                console.print(f"fault in force: #{f['id']} {f['action']} {f['nodes']}"
                              f"{' ' + f['port'] if f.get('port') else ''}{heals}; heal: "
                              f"rlsim fault {entry.spec.name} heal", markup=False,
                              highlight=False, soft_wrap=True)
            if ledger_error:
                err.print(ledger_error, style="red", markup=False, highlight=False,
                          soft_wrap=True)
            _print_connect(c)
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


@app.command()
def down(
    name: str | None = typer.Argument(None, help="The cluster to stop."),
    all_: bool = typer.Option(False, "--all", help="Stop every rlsim cluster and reap leftovers."),
) -> None:
    """Stop a cluster: kill exactly its processes, remove its rules, cgroups and state (a corrupt
    state file: remove it and what it still names).
    Exit 0: stopped; 1: something survived; 2: a bad name, no such cluster, or no name where
    several run."""
    if name is not None:
        _check_name(name, "down")
    entries = state.scan()
    if all_:
        targets = entries
    elif name:
        targets = [e for e in entries if _entry_name(e) == name]
        if not targets:
            raise _no_such("down", name)
    elif len(entries) == 1:
        targets = entries
    else:
        raise _fail(f"rlsim down: name one cluster or give --all: running "
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
    except TimeoutError as e:
        raise _fail(f"rlsim down: {e}", 1) from None
    if all_:
        for chain in iptables.rlsim_chains():
            iptables.heal_chain(chain)

        for thing in reap_orphans({s.session for s in state.load_all()}):
            console.print(f"removed {thing}")


@app.command()
def doctor(
    name: str | None = typer.Argument(None, help="An rlsim cluster (see `rlsim status`)."),
    ray_address: str | None = typer.Option(
        None, "--ray-address", help="Instead: a Ray cluster rlsim did not start (HOST:PORT, with "
        "its auth settings in the environment); every alive node is checked."),
    checkpoint_dir: str | None = typer.Option(
        None, "--checkpoint-dir", help="Also check that every node sees one storage there."),
    as_json: bool = typer.Option(False, "--json", help="The nodes as probed (versions, GPUs, "
                                 "driver, CUDA, NCCL, interface) and the findings, as JSON "
                                 "(what the sign-off report reads as doctor.json)."),
) -> None:
    """Pre-flight checks from every node: versions, ports between nodes, shared checkpoints.
    Exit 0: nothing or only warnings; 1: errors (the run would fail); 2: no such cluster, or
    no Ray cluster answers at --ray-address (within seconds); 130/143: Ctrl-C/SIGTERM."""
    from rlsim import doctor as doc

    if ray_address:
        cluster = _connect_real(doc, ray_address)
    elif name or len(state.load_all()) == 1:
        name = name or state.load_all()[0].spec.name
        if state.load(name) is None:
            err.print(f"[red]no rlsim cluster named {name!r} (see `rlsim status`)[/red]")
            raise typer.Exit(2)
        cluster = _attach(name)
    else:
        err.print("[red]name an rlsim cluster (`rlsim status`) or give --ray-address[/red]")
        raise typer.Exit(2)
    try:
        report = doc.examine(cluster, checkpoint_dir)
    finally:
        if ray_address:
            cluster.stop()
    if as_json:
        from rlsim.signoff import doctor_record

        print(json.dumps(doctor_record(report), indent=1))
        raise typer.Exit(0 if report.ok else 1)
    console.print(_doctor_table(report, checkpoint_dir))
    for f in report.findings:
        colour = "red" if f.level == "error" else "yellow"
        console.print(f"[{colour}]{f.level}[/{colour}] {f.check}: {f.message}.\n  fix: {f.fix}")
    if not report.findings:
        console.print(f"[green]no findings[/green] ({report.seconds:.1f} s)")
    raise typer.Exit(0 if report.ok else 1)


DOCTOR_CONNECT_TIMEOUT_S = 90.0  # joining and placing an agent on every node of a real cluster


def _connect_real(doc, ray_address: str):
    """A RealCluster on ``ray_address``, or exit 2 with one line: asked first with a bounded
    connection, then joined with Ctrl-C, SIGTERM and a time limit ending the wait at once."""
    from rlsim.backends.real import RealCluster

    try:
        host, port = doc.parse_address(ray_address)
    except ValueError as e:
        err.print(f"rlsim doctor: {e}", markup=False, highlight=False, soft_wrap=True)
        raise typer.Exit(2) from None
    with doc.connecting(ray_address, DOCTOR_CONNECT_TIMEOUT_S):
        silence = doc.gcs_silence(host, port)
        if silence is None and (refusal := doc.gcs_refusal(host, port)):
            from rlsim.backends.real import refusal_line

            err.print(f"rlsim doctor: {refusal_line(ray_address, refusal)}", markup=False,
                      highlight=False, soft_wrap=True)
            raise typer.Exit(2)
        if silence is None:
            try:
                return RealCluster(ray_address).start()
            except Exception as e:  # noqa: BLE001 - Ray's many ways of refusing: one line each
                silence = f"joining failed: {str(e).strip().splitlines()[0] if str(e) else e!r}"
    err.print(f"rlsim doctor: no Ray cluster answers at {ray_address} ({silence}). Fix: give the "
              "head's GCS address (HOST:PORT, port 6379 unless `ray start --port` said "
              "otherwise) and check that this host can reach it", markup=False, highlight=False,
              soft_wrap=True)
    raise typer.Exit(2)


def _doctor_table(report, checkpoint_dir: str | None) -> Table:
    table = Table(title="rlsim doctor")
    cols = ["node", "address", "python", "ray", "torch", "deepspeed", "reaches"]
    for col in cols + (["sees checkpoints of"] if checkpoint_dir else []):
        table.add_column(col)
    for ep in report.endpoints:
        look = report.looks.get(ep["index"], {})
        if "error" in look:
            table.add_row(str(ep["index"]), ep["address"], f"[red]{look['error'][:60]}[/red]")
            continue
        v, reach = look.get("versions", {}), look.get("reach", [])
        row = [str(ep["index"]), ep["address"], *(str(v.get(k)) for k in cols[2:6]),
               f"{sum(r['ok'] for r in reach)}/{len(reach)} ports"]
        if checkpoint_dir:
            row.append(", ".join(map(str, report.seen.get(ep["index"], []))) or "-")
        table.add_row(*row)
    return table


def _run_on_every_node(c: LocalCluster) -> list[tuple[int, str, str]]:
    """One tiny Ray task pinned to each node; returns (index, address seen, GPU ids seen)."""
    os.environ.update(c.driver_env())
    import ray

    @ray.remote(num_cpus=0.01, num_gpus=1)
    def where(i: int) -> tuple[int, str, str]:
        return i, ray.util.get_node_ip_address(), ",".join(map(str, ray.get_gpu_ids()))

    ray.init(address=c.address, logging_level="ERROR", log_to_driver=False)
    try:
        refs = [
            where.options(resources={f"rlsim_node_{i}": 0.01}).remote(i)
            for i in range(c.spec.nodes)
        ]
        return ray.get(refs, timeout=60)
    finally:
        ray.shutdown()


@app.command()
def demo(
    nodes: int = typer.Option(_default("nodes"), "--nodes", "-n"),
    fake_gpus: int = typer.Option(_default("gpus_per_node"), "--fake-gpus", "-g"),
    train: bool = typer.Option(True, "--train/--no-train", help="also run the tiny GRPO trainer"),
) -> None:
    """The default job: bring up NODES x FAKE_GPUS, run a task on every node, train the tiny GRPO
    config across two nodes, tear down.
    Exit 0: every task ran where it should and the reward rose; 1: it did not, or the cluster did
    not start; 2: a bad option."""
    t0 = time.monotonic()
    spec = _spec("demo", {"nodes": "--nodes", "gpus_per_node": "--fake-gpus"},
                 name=f"demo-{os.getpid()}", nodes=nodes, gpus_per_node=fake_gpus)
    c = _start(spec, False)
    try:
        console.print(_table(c, c.nodes()))
        console.print(f"ready in {c.timings['ready_s']:.1f} s")
        _print_connect(c)
        results = _run_on_every_node(c)
        ok = True
        for i, addr, gpu in results:
            want = c.state.plan.nodes[i].address if c.state else "?"
            good = addr == want
            ok &= good
            verdict = "ok" if good else f"WRONG (expected {want})"
            console.print(f"task on node {i}: ran at {addr} with GPU {gpu} {verdict}")
        if train:
            ok &= _train_tiny(c)
    finally:
        c.stop()
    console.print(f"torn down; whole run {time.monotonic() - t0:.1f} s")
    if not ok:
        raise typer.Exit(1)


def _train_tiny(c: LocalCluster) -> bool:
    """``python -m trainer --config fixtures/trainer/grpo_tiny.yaml`` on the cluster; prints the
    reward curve's ends from the run's metrics."""
    import subprocess
    import sys
    import tempfile
    from pathlib import Path

    root = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="rlsim-demo-") as run_dir:
        cmd = [sys.executable, "-m", "trainer", "--config",
               str(root / "fixtures" / "trainer" / "grpo_tiny.yaml"), f"run_dir={run_dir}",
               f"data.path={root / 'fixtures' / 'data' / 'digits.jsonl'}"]
        console.print("training: " + " ".join(cmd[1:]))
        t0 = time.monotonic()
        out = subprocess.run(cmd, env={**os.environ, **c.driver_env()}, capture_output=True,
                             text=True, timeout=600)
        rows = [json.loads(x) for x in Path(run_dir, "metrics.jsonl").read_text().splitlines()] \
            if Path(run_dir, "metrics.jsonl").exists() else []
    if out.returncode or not rows:
        console.print(f"[red]trainer failed[/red]\n{out.stdout[-2000:]}{out.stderr[-2000:]}")
        return False
    first = sum(r["rollout/reward_mean"] for r in rows[:5]) / min(5, len(rows))
    last = sum(r["rollout/reward_mean"] for r in rows[-5:]) / min(5, len(rows))
    console.print(f"trained {len(rows)} GRPO steps in {time.monotonic() - t0:.1f} s: reward "
                  f"{first:.3f} (first 5 steps) -> {last:.3f} (last 5)")
    return last > first


@app.command()
def fault(
    name: str = typer.Argument(..., help="The cluster (see `rlsim status`)."),
    action: str = typer.Argument(..., help="kill-node, restart-node, pause-node, resume-node, "
                                 "partition, block-port or heal."),
    args: Annotated[list[str] | None, typer.Argument(
        help="NODE (kill/restart/pause/resume), NODE[,NODE...] (partition), NODE PORT|gcs|"
             "dashboard (block-port); none for heal.")] = None,
    sources: str | None = typer.Option(None, "--from", help="block-port: only from these "
                                       "nodes (J,K); default every other node."),
    for_s: float | None = typer.Option(None, "--for", min=0.1, help="pause-node, partition, "
                                       "block-port: heal on its own after this many seconds."),
) -> None:
    """Inject a fault by hand into a running local or docker cluster, or heal them all. Prints
    what it did and how to undo it; `rlsim status` lists the faults in force; `rlsim down` heals
    everything. Exit 0: done; 1: the backend failed doing it; 2: bad input."""
    from rlsim.faults.by_hand import FaultError, apply

    _check_name(name, "fault")
    try:
        done, undo = apply(name, action, list(args or []), sources, for_s)
    except FaultError as e:
        raise _fail(f"rlsim fault: {e}", 2) from None
    except (RuntimeError, TimeoutError, OSError) as e:
        raise _fail(f"rlsim fault: {action} failed: {e}", 1) from None
    console.print(f"{done}\nundo: {undo}", markup=False, highlight=False)


def _scenario_commands() -> None:
    from rlsim.scenario import cli as scenario_cli

    app.command(name="run")(scenario_cli.run)
    app.command(name="validate")(scenario_cli.validate)
    app.command(name="report")(scenario_cli.report)
    from rlsim.launch import cli as launch_cli
    from rlsim.plan import cli as plan_cli

    app.command(name="plan", context_settings={"allow_extra_args": True,
                                                "ignore_unknown_options": True})(plan_cli.plan)
    app.command(name="launch")(launch_cli.launch)


_scenario_commands()


_signalled: list[int] = []


def _on_sigterm(signum, frame) -> None:
    """SIGTERM unwinds the command as Ctrl-C does (see :func:`main`); a second one (a scheduler
    and its step daemon both signal) must not interrupt the healing the first one started."""
    _signalled.append(signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> None:
    """The ``rlsim`` entry point. Leftovers of abandoned clusters are reaped by the commands that
    start or stop clusters, never by the ones that only read (``status``, ``validate``).

    SIGTERM (a scheduler's cancel, ``timeout``, ``kill``) ends any command as Ctrl-C does: on the
    way out it heals the faults it injected and stops the clusters it started (Python's default
    would die at once and leave them to the next command's reaping). A command it ends with an
    error exits 143."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        app(args=argv, prog_name="rlsim")
    except HomeError as e:
        err.print(f"rlsim: {e}", style="red", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except SystemExit as e:
        # ray.init() puts in a SIGTERM handler of its own, sys.exit(15): the same unwinding
        if (_signalled and e.code not in (0, None)) or e.code == signal.SIGTERM:
            err.print("rlsim: stopped by SIGTERM; what it had started is stopped",
                      markup=False, highlight=False)
            sys.exit(143)
        raise


if __name__ == "__main__":
    main()
