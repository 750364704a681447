"""What every command prints through: the consoles, one-line refusals with their exit code, and the
cluster-name check the commands that name a cluster share."""

from __future__ import annotations

import typer
from rich.console import Console

from rlsim.host.spec import name_problem

console = Console()
err = Console(stderr=True)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as one line on stderr (never read as markup) and return the exit."""
    err.print(message, style="red", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def check_name(name: str, command: str) -> None:
    problem = name_problem(name)
    if problem:
        raise fail(f"rlsim {command}: {problem}; fix: name a cluster from `rlsim status`", 2)


def no_such(command: str, name: str) -> typer.Exit:
    return fail(f"rlsim {command}: no rlsim cluster named {name!r}; fix: name one from "
                 "`rlsim status`", 2)
