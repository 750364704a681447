"""``rlsim launch PLATFORM``: write a ready launcher that starts Ray on N GPU nodes, waits until
they all joined, runs rlsim's doctor and scenarios with ``--backend real`` on the head and keeps
the report in a shared directory; or, for ``kuberay-substrate``, the RayCluster of CPU pods that
hosts simulated clusters (``cluster: {on: ...}``). Exit 0: written; 2: bad input."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError

from rlsim.commands.console import plain_console
from rlsim.files import shown, write_file
from rlsim.launch import kuberay, slurm, tasks
from rlsim.launch.model import Launch
from rlsim.scenario.loader import catalogue

console = plain_console(soft_wrap=True)
# platform -> (render, file name, how to start it, the Python the nodes run by default)
PLATFORMS = {
    "slurm": (slurm.script, "rlsim-acceptance.sbatch", "sbatch {path}", sys.executable),
    "kuberay": (kuberay.script, "rlsim-acceptance-rayjob.yaml", "kubectl apply -f {path}",
                "python3"),
    "skypilot": (tasks.skypilot_script, "rlsim-acceptance-sky.yaml", "sky launch {path}",
                 "python3"),
    "dstack": (tasks.dstack_script, "rlsim-acceptance.dstack.yml", "dstack apply -f {path}",
               "python3"),
}
OPTIONS = {"accelerator": "--accelerator", "nodes": "--nodes", "gpus_per_node": "--gpus-per-node",
           "python": "--python",
           "scenarios": "--scenarios", "report_dir": "--report-dir", "image": "--image",
           "time": "--time", "port": "--port", "wait_s": "--wait"}


def launch(
    platform: Annotated[str, typer.Argument(help="slurm, kuberay, skypilot, dstack or "
                                            "kuberay-substrate")],
    out: Annotated[Path, typer.Option(help="Directory to write the launcher into.")],
    nodes: int = typer.Option(..., help="GPU nodes, the head included (kuberay-substrate: CPU "
                              "pods, the head's included, one per simulated node)."),
    gpus_per_node: int | None = typer.Option(None, help="GPUs each node has (not for "
                                             "kuberay-substrate: its pods have none)."),
    image: str | None = typer.Option(None, help="Container image every node runs (Slurm: "
                                     "pyxis --container-image)."),
    accelerator: str | None = typer.Option(None, help="GPU type to ask for (SkyPilot, dstack; "
                                           "default H100)."),
    scenarios: Annotated[list[str] | None, typer.Option(
        help="Scenario files or folders as the nodes see them (repeatable or comma-joined; "
             "default for Slurm: the catalogue beside this rlsim).")] = None,
    report_dir: str | None = typer.Option(None, help="A directory every node shares, for the "
                                          "report and Ray's token (default: OUT/reports)."),
    python: str | None = typer.Option(None, help="The Python with rlsim and Ray on every node "
                                      "(default: this one for Slurm, python3 in the image "
                                      "elsewhere)."),
    time: str | None = typer.Option(None, help="The job's time limit (Slurm, KubeRay, dstack; "
                                    "default 01:00:00), in Slurm's forms."),
    port: int = typer.Option(6379, help="The head's GCS port."),
    wait: float = typer.Option(600, help="Seconds the nodes may take to join."),
    allow_disruptive: bool = typer.Option(False, "--allow-disruptive", help="Run scenarios "
                                          "that kill nodes or processes (a cluster nobody "
                                          "else uses)."),
    shared_dir: str = typer.Option("/rlsim", help="kuberay-substrate: where every pod mounts "
                                   "the shared claim (runs and reports)."),
) -> None:
    """Write a launcher for PLATFORM into OUT. Exit 0: written; 2: bad input."""
    if platform == "kuberay-substrate":
        given = {"--gpus-per-node": gpus_per_node, "--accelerator": accelerator,
                 "--scenarios": scenarios, "--report-dir": report_dir, "--python": python,
                 "--time": time, "--port": None if port == 6379 else port,
                 "--wait": None if wait == 600 else wait,
                 "--allow-disruptive": allow_disruptive or None}
        if extra := [k for k, v in given.items() if v is not None]:
            _fail(f"{', '.join(extra)}: a substrate's RayCluster runs nothing by itself and "
                  "stays until deleted (its pods have no GPUs; KubeRay's GCS port is 6379); "
                  "fix: drop them, and give scenarios `cluster: {on: ...}` instead")
        _substrate(out, nodes, image, shared_dir)
        return
    if platform not in PLATFORMS:
        _fail(f"{platform!r}: rlsim launch writes {', '.join(PLATFORMS)} or kuberay-substrate")
    if gpus_per_node is None:
        _fail("--gpus-per-node: give the GPUs each node has (e.g. --gpus-per-node 8)")
    if shared_dir != "/rlsim":
        _fail(f"--shared-dir {shared_dir}: only kuberay-substrate mounts a shared claim; "
              f"{platform}'s shared directory is --report-dir")
    render, name, start, default_python = PLATFORMS[platform]
    # an option a platform has no place for is refused, not dropped without a word
    if accelerator is not None and platform in ("slurm", "kuberay"):
        _fail(f"--accelerator {accelerator}: {platform} asks for GPUs by count; a GPU type is "
              "the site's (Slurm: edit the #SBATCH --gres line, e.g. gpu:h100:8; KubeRay: a "
              "nodeSelector); fix: drop --accelerator")
    if time is not None and platform == "skypilot":
        _fail("--time: a SkyPilot task has no time limit of its own; fix: drop --time (end it "
              "with `sky down`, or give the cluster an autostop)")
    given = scenarios or []
    scenarios = [p.strip() for g in given for p in g.split(",") if p.strip()]
    if given and not scenarios:
        _fail(f"--scenarios {','.join(given)!r}: names no file or folder; give the scenario "
              "files or folders as the nodes see them (e.g. --scenarios /opt/rlsim/scenarios)")
    if not scenarios and platform != "slurm":
        _fail("--scenarios: give the scenario files or folders as the image sees them (e.g. "
              "--scenarios /opt/rlsim/scenarios)")
    fields = dict(nodes=nodes, gpus_per_node=gpus_per_node, python=python or default_python,
                  scenarios=scenarios or [str(catalogue())],
                  report_dir=report_dir or str((out / "reports").resolve()), image=image,
                  time=time or "01:00:00", port=port, wait_s=wait,
                  allow_disruptive=allow_disruptive, accelerator=accelerator or "H100")
    try:
        spec = Launch(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        _fail(f"{OPTIONS.get(field, field)} {fields.get(field)}: "
              f"{first['msg'].removeprefix('Value error, ')}")
    try:
        text = render(spec, name)
    except ValueError as e:  # what this platform needs that was not given (e.g. an image)
        _fail(str(e))
    path = _write(out, name, text)
    console.print(f"wrote {path}: start it with `{start.format(path=path)}`; the report lands "
                  f"in {spec.report_dir}", markup=False)


def _substrate(out: Path, nodes: int, image: str | None, shared_dir: str) -> None:
    name = "rlsim-substrate-raycluster.yaml"
    if not image:
        _fail("--image: KubeRay runs every pod of a container image; give one with rlsim, the "
              "Ray release of the machine you drive it from, and iptables")
    options = {"machines": "--nodes", "shared_dir": "--shared-dir", "image": "--image"}
    fields = dict(machines=nodes, image=image, shared_dir=shared_dir)
    try:
        spec = kuberay.Substrate(**fields)
    except ValidationError as e:
        first = e.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        _fail(f"{options.get(field, field)} {fields.get(field)}: "
              f"{first['msg'].removeprefix('Value error, ')}")
    _write(out, name, kuberay.substrate_script(spec, name))
    console.print(f"wrote {out / name}: create the claim {kuberay.SHARED_CLAIM!r}, then "
                  f"`kubectl apply -f {out / name}`; scenarios name it as "
                  f"`cluster: {{on: \"{kuberay.SUBSTRATE}-head-svc:6379\"}}`", markup=False)


def _write(out: Path, name: str, text: str) -> Path:
    try:
        out.mkdir(parents=True, exist_ok=True)
        path = out / name
        write_file(path, text, 0o755 if path.suffix in (".sbatch", ".sh") else 0o644)
    except OSError as e:
        _fail(f"--out {out}: cannot write there ({e.strerror})")
    return path


def _fail(message: str) -> None:
    """One line (a value's control characters escaped, as :func:`fail` prints them), exit 2."""
    console.print(f"rlsim launch: {shown(message)}", style="red", markup=False)
    raise typer.Exit(2)
