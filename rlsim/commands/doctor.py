"""``rlsim doctor``: pre-flight checks from every node of an rlsim cluster or a real one."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from rlsim.commands.cluster import attach_named
from rlsim.commands.console import console, err, styled
from rlsim.host import state
from rlsim.ray_internals.gcs import no_answer as gcs_no_answer
from rlsim.ray_internals.gcs import refusal as gcs_refusal


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
    Exit 0: nothing or only warnings; 1: errors (the run would fail); 2: no such cluster, one
    on a substrate that does not answer, or no Ray cluster answers at --ray-address (each said
    within seconds); 130/143: Ctrl-C/SIGTERM."""
    from rlsim import doctor as doc

    if ray_address:
        cluster = _connect_real(doc, ray_address)
    elif name or len(state.load_all()) == 1:
        name = name or state.load_all()[0].spec.name
        if state.load(name) is None:
            err.print(f"no rlsim cluster named {name!r} (see `rlsim status`)", style="red")
            raise typer.Exit(2)
        try:
            cluster = attach_named(name)
        except LookupError as e:  # on a substrate: held by its owner, or it does not answer
            err.print(f"rlsim doctor: {e}", markup=False, highlight=False, soft_wrap=True)
            raise typer.Exit(2) from None
    else:
        err.print("name an rlsim cluster (`rlsim status`) or give --ray-address", style="red")
        raise typer.Exit(2)
    try:
        report = doc.examine(cluster, checkpoint_dir)
    finally:
        if ray_address:
            cluster.stop()
    if as_json:
        print(json.dumps(report.record(), indent=1))
        raise typer.Exit(0 if report.ok else 1)
    console.print(_doctor_table(report, checkpoint_dir))
    for f in report.findings:
        colour = "red" if f.level == "error" else "yellow"
        console.print(styled((f.level, colour), f" {f.check}: {f.message}.\n  fix: {f.fix}"))
    for line in _ray_lines(report.ray):
        console.print(line, highlight=False, markup=False)
    if not report.findings:
        console.print(styled(("no findings", "green"), f" ({report.seconds:.1f} s)"))
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
        # a greeting heard and a request answered, each within seconds: a GCS that greets and
        # answers nothing held Ray's own connect the whole 90 s
        silence = gcs_no_answer(host, port)
        if silence is None and (refusal := gcs_refusal(host, port)):
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


def _ray_lines(ray: dict) -> list[str]:
    """The doctor's words on Ray: the release, the auth mode the GCS enforces, the accelerations
    on Ray's plain path and why (`rlsim ray` lists them all)."""
    if not ray:
        return []
    lines = [f"ray {ray.get('version')}: auth in force {ray.get('auth', 'not asked')}; "
             f"{len(ray.get('in_force', []))} of rlsim's accelerations in force"]
    lines += [f"  plain path: {name}: {why}" for name, why in ray.get("plain", {}).items()]
    return lines


def _doctor_table(report, checkpoint_dir: str | None) -> Table:
    table = Table(title="rlsim doctor")
    cols = ["node", "address", "python", "ray", "torch", "deepspeed", "reaches"]
    for col in cols + (["sees checkpoints of"] if checkpoint_dir else []):
        table.add_column(col)
    for ep in report.endpoints:
        look = report.looks.get(ep["index"], {})
        if "error" in look:
            table.add_row(str(ep["index"]), ep["address"], styled((look["error"][:60], "red")))
            continue
        v, reach = look.get("versions", {}), look.get("reach", [])
        row = [str(ep["index"]), ep["address"], *(str(v.get(k)) for k in cols[2:6]),
               f"{sum(r['ok'] for r in reach)}/{len(reach)} ports"]
        if checkpoint_dir:
            row.append(", ".join(map(str, report.seen.get(ep["index"], []))) or "-")
        table.add_row(*row)
    return table
