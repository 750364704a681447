"""What every command prints through: the consoles, one-line refusals with their exit code, and the
cluster-name check the commands that name a cluster share.

Every console prints text as text: no markup (a file named ``[red]x.yaml`` is printed as named), no
emoji codes (``run:fire:1.yaml`` is not an emoji), no highlighting. Colour is given as a style, or
with :func:`styled`, never inside a string that may hold a path or a message."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.text import Text

from rlsim.files import shown
from rlsim.host.spec import name_problem


def plain_console(**options) -> Console:
    """A console that prints every string as plain text (see above)."""
    return Console(markup=False, emoji=False, highlight=False, **options)


console = plain_console()
err = plain_console(stderr=True)


def styled(*parts: str | tuple[str, str]) -> Text:
    """One line of text from ``parts``: a plain string, or ``(text, style)`` such as
    ``("FAIL", "red")``."""
    return Text.assemble(*parts)


def fail(message: str, code: int) -> typer.Exit:
    """Print ``message`` as one line on stderr (never read as markup; a control character in it,
    a newline or an escape from a value the user gave, written as its escape, so that it can
    neither forge a line nor move the cursor) and return the exit."""
    err.print(shown(message), style="red", markup=False, highlight=False, soft_wrap=True)
    return typer.Exit(code)


def check_name(name: str, command: str) -> None:
    problem = name_problem(name)
    if problem:
        raise fail(f"rlsim {command}: {problem}; fix: name a cluster from `rlsim status`", 2)


def no_such(command: str, name: str) -> typer.Exit:
    return fail(f"rlsim {command}: no rlsim cluster named {name!r}; fix: name one from "
                 "`rlsim status`", 2)
