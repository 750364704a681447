"""``rlsim ray``: what rlsim uses of the installed Ray, probed from its files (no cluster)."""

from __future__ import annotations

import json

import typer
from rich.table import Table

from rlsim.commands.console import console, styled


def ray(as_json: bool = typer.Option(False, "--json", help="The same as JSON: the version, "
                                     "whether rlsim is proven on it, each capability in force "
                                     "or on Ray's plain path and why.")) -> None:
    """The installed Ray and what rlsim uses of its internals: each acceleration in force, or
    Ray's plain path and why (probed from Ray's files, or read from the answers kept in the rlsim
    home; kept answers found damaged are probed again, and said). Exit 0: every capability rlsim
    cannot do without is there; 1: one is missing (rlsim cannot run on this Ray)."""
    from rlsim import ray_internals as ri

    statuses = ri.statuses()
    missing = [s for s in statuses if s.required and not s.available]
    note = ri.record_note()
    if as_json:
        print(json.dumps({**ri.summary(), "probe_record": note, "capabilities": [
            {"name": s.name, "in_force": s.available, "why_not": s.why, "gives": s.gives,
             "plain": s.plain, "required": s.required} for s in statuses]}, indent=1))
        raise typer.Exit(1 if missing else 0)
    outside = ri.version_problem()
    console.print(styled(f"Ray {ri.ray_version()} at {ri.surface().root}; rlsim is proven on "
                         f"Ray {ri.SUPPORTED_TEXT}",
                         (f" ({outside})" if outside else "", "yellow")))
    table = Table(title="what rlsim uses of Ray's internals")
    for col in ("capability", "in force", "gives / plain path"):
        table.add_column(col)
    for s in statuses:
        table.add_row(s.name, "yes" if s.available else styled(("no", "yellow")),
                      s.gives if s.available else f"{s.plain}; because {s.why}")
    console.print(table)
    if note:
        console.print(note, style="yellow", markup=False)
    if not ri.token_auth():
        console.print(ri.open_cluster_line(), style="yellow")
    raise typer.Exit(1 if missing else 0)
