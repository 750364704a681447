"""``rlsim launch PLATFORM``: write a ready launcher that starts Ray on N GPU nodes, waits until
they all joined, runs rlsim's doctor and scenarios with ``--backend real`` on the head and keeps
the report in a shared directory. Exit 0: written; 2: bad input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console

from rlsim.launch import slurm
from rlsim.launch.model import Launch

console = Console(soft_wrap=True, highlight=False)
PLATFORMS = {"slurm": (slurm.script, "rlsim-acceptance.sbatch")}
OPTIONS = {"nodes": "--nodes", "gpus_per_node": "--gpus-per-node", "python": "--python",
           "scenarios": "--scenarios", "report_dir": "--report-dir", "image": "--image",
           "time": "--time", "port": "--port", "wait_s": "--wait"}


def launch(
    platform: Annotated[str, typer.Argument(help="slurm")],
    out: Annotated[Path, typer.Option(help="Directory to write the launcher into.")],
    nodes: int = typer.Option(..., help="GPU nodes, the head included."),
    gpus_per_node: int = typer.Option(..., help="GPUs each node has."),
    image: str | None = typer.Option(None, help="Container image every node runs (Slurm: "
                                     "pyxis --container-image)."),
    scenarios: Annotated[list[str] | None, typer.Option(
        help="Scenario files or folders as the nodes see them (repeatable; default: the "
             "catalogue beside this rlsim).")] = None,
    report_dir: str | None = typer.Option(None, help="A directory every node shares, for the "
                                          "report and Ray's token (default: OUT/reports)."),
    python: str = typer.Option(sys.executable, help="The Python with rlsim and Ray on every "
                               "node."),
    time: str = typer.Option("01:00:00", help="The job's time limit."),
    port: int = typer.Option(6379, help="The head's GCS port."),
    wait: float = typer.Option(600, help="Seconds the nodes may take to join."),
    allow_disruptive: bool = typer.Option(False, "--allow-disruptive", help="Run scenarios "
                                          "that kill nodes or processes (a cluster nobody "
                                          "else uses)."),
) -> None:
    """Write a launcher for PLATFORM into OUT. Exit 0: written; 2: bad input."""
    if platform not in PLATFORMS:
        _fail(f"{platform!r}: rlsim launch writes {', '.join(PLATFORMS)}")
    repo = Path(__file__).resolve().parents[2]
    fields = dict(nodes=nodes, gpus_per_node=gpus_per_node, python=python,
                  scenarios=scenarios or [str(repo / "scenarios")],
                  report_dir=report_dir or str((out / "reports").resolve()), image=image,
                  time=time, port=port, wait_s=wait, allow_disruptive=allow_disruptive)
    try:
        spec = Launch(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        _fail(f"{OPTIONS.get(field, field)} {fields.get(field)}: "
              f"{first['msg'].removeprefix('Value error, ')}")
    render, name = PLATFORMS[platform]
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / name
        path.write_text(render(spec, name))
        path.chmod(0o755)
    except OSError as e:
        _fail(f"--out {out}: cannot write there ({e.strerror})")
    console.print(f"wrote {path}: submit it with `sbatch {path}`; the report lands in "
                  f"{spec.report_dir}/<job id>", markup=False)


def _fail(message: str) -> None:
    console.print(f"rlsim launch: {message}", style="red", markup=False)
    raise typer.Exit(2)
