"""MkDocs hook: the reference pages, generated from the code at every build, never written twice:
the command line (from the typer app), every fault and check with its parameters (from their
models and docstrings), the scenario file's sections, the events a trainer may write, the
Python API rlsim offers, and what rlsim uses of Ray's internals (from its capabilities). A field or an option documented here is the one the code reads."""

from __future__ import annotations

import inspect
import textwrap
import typing

from mkdocs.structure.files import File

PAGES = {
    "reference/cli.md": "cli",
    "reference/faults.md": "faults",
    "reference/checks.md": "checks",
    "reference/scenario-file.md": "scenario_file",
    "reference/events.md": "events",
    "reference/python-api.md": "python_api",
    "reference/ray-internals.md": "ray_internals",
}


def on_files(files, config):
    for path, maker in PAGES.items():
        files.append(File.generated(config, path, content=globals()[maker]()))
    return files


# -- helpers -----------------------------------------------------------------------------------
def _one_line(text: str | None) -> str:
    return " ".join((text or "").split()).replace("|", "\\|")


def _doc(obj) -> str:
    return inspect.cleandoc(obj.__doc__ or "")


def _type(annotation) -> str:
    text = getattr(annotation, "__name__", None) if not typing.get_args(annotation) else None
    return (text or str(annotation).replace("typing.", "")).replace("|", "or")


def _fields(model) -> str:
    rows = ["| field | type | default | what |", "|---|---|---|---|"]
    for name, field in model.model_fields.items():
        default = "required" if field.is_required() else repr(field.get_default(
            call_default_factory=True))
        rows.append(f"| `{name}` | {_one_line(_type(field.annotation))} | "
                    f"{_one_line(default)} | {_one_line(field.description)} |")
    return "\n".join(rows) if len(rows) > 2 else "No parameters."


# -- pages ---------------------------------------------------------------------------------------
def cli() -> str:
    import click
    import typer

    from rlsim import commands

    group = typer.main.get_command(commands.app)
    out = ["# Command line", "", "Generated from the `rlsim` typer app: every command and "
           "option as `rlsim COMMAND --help` prints it.", ""]
    ctx = click.Context(group, info_name="rlsim")
    for name in sorted(group.list_commands(ctx)):
        cmd = group.get_command(ctx, name)
        out += [f"## rlsim {name}", "", "```text",
                cmd.get_usage(click.Context(cmd, info_name=f"rlsim {name}")), "```", "",
                inspect.cleandoc(cmd.help or ""), "",
                "| argument or option | help |", "|---|---|"]
        for p in cmd.params:
            flags = ", ".join(f"`{o}`" for o in (p.opts + p.secondary_opts)) \
                if isinstance(p, click.Option) else f"`{p.name.upper()}`"
            out.append(f"| {flags} | {_one_line(getattr(p, 'help', '') or '')} |")
        out.append("")
    return "\n".join(out)


def faults() -> str:
    import importlib

    from rlsim.faults import FAULTS

    out = ["# Faults", "", "Generated from the fault library (`rlsim/faults/`, and any package's "
           "faults registered under the entry point group `rlsim.faults`). In a scenario: "
           "`faults: [{at: {...}, NAME: {parameters}, for_s: S}]`.", ""]
    for name, fault in sorted(FAULTS.items()):
        module = importlib.import_module(fault.__module__)
        out += [f"## {name}", "", inspect.cleandoc(module.__doc__ or fault.__doc__ or ""), ""]
        if fault.by_hand:
            args = " ".join(a.upper() for a in fault.cli_args)
            out += [f"By hand: `rlsim fault CLUSTER {fault.action()} {args}` (other parameters "
                    "as `--name VALUE`).", ""]
        needs = ", ".join(n.__name__ for n in fault.needs) or "nothing"
        out += [f"Needs of the backend: {needs}.", "", _fields(fault.Params), ""]
    return "\n".join(out)


def checks() -> str:
    from rlsim.checks import CHECKS

    out = ["# Checks", "", "Generated from the check registry (`rlsim/checks/`, and any "
           "package's checks under the entry point group `rlsim.checks`). In a scenario: "
           "`expect: [{NAME: {parameters}}]`, or the scalar shorthand where a check has one.", ""]
    for name, check in sorted(CHECKS.items()):
        out += [f"## {name}", "", _doc(check.judge) or _doc(check.Params), ""]
        if check.scalar is not None:
            out += [f"Shorthand: `{name}: VALUE` (see the parameters).", ""]
        if check.twin:
            out += ["Runs the fault-free twin first (same config and seed, same cluster).", ""]
        out += [_fields(check.Params), ""]
    return "\n".join(out)


def scenario_file() -> str:
    from rlsim.scenario.schema import At, ClusterSection, FaultEntry, Scenario, TrainerSection

    out = ["# The scenario file", "", "Generated from the models that read it "
           "(`rlsim/scenario/schema.py`). `rlsim schema` prints its JSON Schema for editors; "
           "`rlsim validate FILE` checks a file against the cluster and the trainer too.", ""]
    for title, model in (("Top level", Scenario), ("cluster", ClusterSection),
                         ("trainer", TrainerSection), ("A faults entry", FaultEntry),
                         ("at and heal_at", At)):
        out += [f"## {title}", "", _doc(model) if model is not Scenario else "", "",
                _fields(model), ""]
    return "\n".join(out)


def events() -> str:
    import rlsim.events
    import trainer.events

    return "\n".join([
        "# Events a trainer writes", "",
        "Generated from `rlsim.events` (the vocabulary any trainer may write, dependency-free) "
        "and the reference trainer's log (`trainer.events`).", "",
        "## rlsim.events", "", "```text", inspect.cleandoc(rlsim.events.__doc__), "```", "",
        "## The reference trainer's events", "", "```text",
        inspect.cleandoc(trainer.events.__doc__), "```", ""])


def python_api() -> str:
    from rlsim.backends.local import LocalCluster
    from rlsim.events import EventLog
    from rlsim.scenario.loader import load
    from rlsim.scenario.runner import run_scenario

    out = ["# Python API", "", "Generated from the docstrings of what rlsim offers a Python "
           "caller: a cluster to start and stop, a scenario to load and run, the event log a "
           "trainer writes.", ""]
    for obj in (LocalCluster, load, run_scenario, EventLog):
        sig = "" if inspect.isclass(obj) else str(inspect.signature(obj))
        out += [f"## `{obj.__module__}.{obj.__qualname__}{sig}`", "",
                textwrap.dedent(_doc(obj)), ""]
        if inspect.isclass(obj):
            for name, member in inspect.getmembers(obj, inspect.isfunction):
                if not name.startswith("_") and member.__doc__:
                    out += [f"### `{name}{inspect.signature(member)}`", "", _doc(member), ""]
    return "\n".join(out)


def ray_internals() -> str:
    from rlsim import ray_internals as ri

    out = ["# Ray's internals", "", _doc(ri).split("\n\n")[0], "",
           f"rlsim is proven on Ray {ri.SUPPORTED_TEXT} ([the matrix](../ray-releases.md)). "
           "Each row is a capability: what it gives where the installed Ray has it, the plain "
           "path rlsim takes where it does not, and whether it is only an acceleration "
           "(`RLSIM_RAY_PLAIN=all` turns those off). `rlsim ray` prints each one's state on "
           "the Ray you have; a scenario's timeline says it in its `ray` event.", "",
           "| capability | gives | without it | kind |", "|---|---|---|---|"]
    for c in ri.CAPABILITIES:
        kind = "required" if c.required else "acceleration" if c.acceleration else "function"
        out.append(f"| `{c.name}` | {_one_line(c.gives)} | {_one_line(c.plain)} | {kind} |")
    return "\n".join(out + [""])
