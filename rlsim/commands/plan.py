"""``rlsim plan FRAMEWORK``: will this launch fit this cluster, and where does each role land.

    rlsim plan openrlhf --cluster 4x8 -- <the launch command as typed>
    rlsim plan verl --cluster 2x8 -- python3 -m verl.trainer.main_ppo trainer.nnodes=2 ...
    rlsim plan roll --cluster 2x2 CONFIG.yaml
    rlsim plan rlinf --cluster 4x8 CONFIG.yaml
    rlsim plan openrlhf --release v0.8.11 --cluster 2x8 -- <command>   (as that release judges)

Exit 0: it fits; 1: it does not; 2: bad input (the command or file cannot be read).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Annotated

import typer

from rlsim.commands.console import plain_console
from rlsim.plan import openrlhf, rlinf, roll, verl
from rlsim.plan.model import Layout, NodeCapacity, PlanInputError, parse_cluster, place, render

console = plain_console(soft_wrap=True)
FRAMEWORKS = {"openrlhf": "command", "verl": "command", "roll": "file", "rlinf": "file"}


def _layout(framework: str, args: list[str], nodes: list[NodeCapacity],
            release: str | None = None) -> Layout:
    if FRAMEWORKS[framework] == "command":
        if not args:
            raise PlanInputError(f"give the launch command after --, e.g. rlsim plan {framework} "
                                 "--cluster 2x8 -- python3 -m ...")
        return (openrlhf if framework == "openrlhf" else verl).layout(args, release)
    if len(args) != 1:
        raise PlanInputError(f"give one {framework} config file, e.g. rlsim plan {framework} "
                             "--cluster 2x8 config.yaml")
    return (roll if framework == "roll" else rlinf).layout(args[0], nodes, release)


def live_nodes(address: str) -> list[NodeCapacity]:
    """The alive nodes with GPUs of the Ray cluster at ``address``, each with its free GPUs and
    CPUs (read from its GCS, no driver)."""
    from rlsim.backends.ray_state import reader
    from rlsim.host.home import auth_token_path
    from rlsim.ray_internals.gcs import no_answer as gcs_no_answer
    from rlsim.reach import parse_address

    try:
        host, port = parse_address(address)
    except ValueError as e:
        raise PlanInputError(str(e)) from None
    # asked before Ray's reader connects, which waits minutes on a GCS that greets and then
    # answers nothing
    if silence := gcs_no_answer(host, port):
        raise PlanInputError(f"no Ray cluster answers at {address} ({silence}); fix: give the "
                             "head's GCS address (HOST:PORT)")
    token = os.environ.get("RAY_AUTH_TOKEN_PATH") or str(auth_token_path())
    try:
        with reader(address, token) as gs:
            free = gs.available_resources_per_node()
            alive = {n["NodeID"]: n["NodeManagerAddress"] for n in gs.node_table()
                     if n["Alive"]}
    except Exception as e:  # noqa: BLE001 - Ray's ways of refusing a reader: one line each
        raise PlanInputError(f"the Ray cluster at {address} refused to be read "
                             f"({str(e).strip().splitlines()[0][:200] if str(e) else e!r}); "
                             "with token auth, export RAY_AUTH_TOKEN_PATH=<its token file>") \
            from None
    nodes = sorted(((alive[i], r) for i, r in free.items() if i in alive and r.get("GPU")),
                   key=lambda x: x[0])
    if not nodes:
        raise PlanInputError(f"the Ray cluster at {address} has no alive node with free GPUs")
    return [NodeCapacity(int(r["GPU"]), r.get("CPU")) for _, r in nodes]


def plan(
    ctx: typer.Context,
    framework: str = typer.Argument(..., help="openrlhf, verl, roll or rlinf."),
    cluster: str | None = typer.Option(None, help="NODESxGPUS (e.g. 4x8) or each node's GPUs "
                                       "(e.g. 8,8,4)."),
    ray_address: str | None = typer.Option(None, help="Judge against a live cluster's alive "
                                           "nodes and free GPUs (HOST:PORT) instead."),
    cpus_per_node: float | None = typer.Option(None, help="CPUs of each node (--cluster); "
                                               "unset, CPUs are not judged."),
    as_json: bool = typer.Option(False, "--json", help="Machine-readable output."),
    rehearse: bool = typer.Option(False, help="Create the framework's placement groups on a "
                                  "simulated cluster of that shape and report which Ray places."),
    rehearse_timeout: float = typer.Option(10.0, help="Seconds --rehearse waits for each group."),
    emit_scenario: Annotated[Path | None, typer.Option(
        help="Write a scenario whose reference trainer mirrors this layout on fake GPUs.")] = None,
    release: str | None = typer.Option(
        None, help="Judge by this release of the framework (e.g. v0.8.11), as it would: what it "
        "lacks or refuses is an error. Unset: OpenRLHF and verl by the releases the launch's "
        "flags or keys select (another release's flag is a warning), ROLL and RLinf by the "
        "newest."),
) -> None:
    """Will a verl, OpenRLHF, ROLL or RLinf launch fit, and where does each role land?
    Exit 0: fits; 1: does not fit; 2: bad input."""
    try:
        if framework not in FRAMEWORKS:
            raise PlanInputError(f"{framework!r}: rlsim plans {', '.join(FRAMEWORKS)}")
        if (cluster is None) == (ray_address is None):
            raise PlanInputError("give one of --cluster NODESxGPUS or --ray-address HOST:PORT")
        if rehearse and ray_address:
            raise PlanInputError("--rehearse starts a simulated cluster of the --cluster shape; "
                                 "give --cluster instead of --ray-address")
        if cpus_per_node is not None and not 0 < cpus_per_node < float("inf"):
            raise PlanInputError(f"--cpus-per-node {cpus_per_node}: give the CPUs each node "
                                 "has, above 0")
        if rehearse and not 0 < rehearse_timeout <= 3600:
            raise PlanInputError(f"--rehearse-timeout {rehearse_timeout}: give seconds between "
                                 "0 and 3600 for each group")
        nodes = parse_cluster(cluster) if cluster is not None else live_nodes(ray_address)
        if cpus_per_node is not None:
            nodes = [NodeCapacity(n.gpus, cpus_per_node) for n in nodes]
        try:
            layout = _layout(framework, list(ctx.args), nodes, release)
        except (ZeroDivisionError, TypeError, KeyError) as e:  # a value the framework refuses
            raise PlanInputError(f"a size in the launch is zero or missing where {framework} "
                                 f"divides by it or reads it ({type(e).__name__}: {e}); fix: "
                                 "give GPUs, nodes and batch sizes of at least 1") from None
        except AttributeError as e:  # a list or a number where the config has a section
            raise PlanInputError(f"a section of the {framework} config has the wrong type "
                                 f"({e}); fix: write it as a mapping (key: value), as "
                                 f"{framework}'s own example configs do") from None
        placement = place(layout, nodes)
        if emit_scenario is not None:
            from rlsim.plan.emit import write_scenario

            try:
                write_scenario(placement, emit_scenario)
            except OSError as e:
                raise PlanInputError(f"--emit-scenario {emit_scenario}: cannot write it "
                                     f"({e.strerror})") from None
    except PlanInputError as e:
        console.print(f"rlsim plan: {e}", style="red", markup=False)
        raise typer.Exit(2) from None
    rehearsal = None
    if rehearse:
        from pydantic import ValidationError

        from rlsim.plan.rehearse import rehearse as run_rehearsal

        try:
            rehearsal = run_rehearsal(placement, rehearse_timeout)
        except ValidationError as e:  # a shape this machine cannot simulate (e.g. 64 nodes)
            why = e.errors()[0]["msg"].removeprefix("Value error, ")
            console.print(f"rlsim plan: --rehearse cannot simulate this cluster: "
                          f"{e.errors()[0]['loc'][0] if e.errors()[0]['loc'] else 'shape'}: "
                          f"{why}; fix: judge it without --rehearse, or rehearse a smaller "
                          "--cluster", style="red", markup=False)
            raise typer.Exit(2) from None
        except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as e:
            console.print(f"rlsim plan: the rehearsal failed: {e}", style="red", markup=False)
            raise typer.Exit(1) from None
    if as_json:
        out = placement.to_json()
        if rehearsal is not None:
            out["rehearsal"] = rehearsal
        print(json.dumps(out, indent=2))
    else:
        console.print(render(placement), markup=False)
        if rehearsal is not None:
            console.print(_rehearsal_text(rehearsal), markup=False)
        if emit_scenario is not None:
            console.print(f"scenario written: {emit_scenario} (rlsim run {emit_scenario})")
    placed_all = rehearsal is None or all(g["placed"] for g in rehearsal["groups"])
    raise typer.Exit(0 if placement.fits and placed_all else 1)


def _rehearsal_text(r: dict) -> str:
    lines = [f"rehearsal on a simulated cluster ({r['cluster']}), each group waited at most "
             f"{r['timeout_s']:g} s:"]
    for g in r["groups"]:
        if g["placed"]:
            lines.append(f"  {g['name']}: placed in {g['seconds']:.2f} s on node(s) {g['nodes']}")
        else:
            lines.append(f"  {g['name']}: NOT placed after {g['seconds']:.1f} s (Ray: "
                         f"{g['state']}); free then: {g['free']}")
    return "\n".join(lines)
