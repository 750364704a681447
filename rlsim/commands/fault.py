"""``rlsim fault NAME ACTION``: chaos by hand on a running cluster (:mod:`rlsim.faults.ledger`)."""

from __future__ import annotations

from typing import Annotated

import typer

from rlsim.commands.console import check_name, console, fail


def fault(
    ctx: typer.Context,
    name: str = typer.Argument(..., help="The cluster (see `rlsim status`)."),
    action: str = typer.Argument(..., help="A fault with hyphens for underscores (kill-node, "
                                 "restart-node, pause-node, slow-node, partition, block-port, "
                                 "degrade-link), "
                                 "an undo (resume-node), or heal."),
    args: Annotated[list[str] | None, typer.Argument(
        help="The fault's arguments: NODE (kill/restart/pause/resume), NODE[,NODE...] "
             "(partition), NODE PORT|gcs|dashboard (block-port), NODE --cpu CORES (slow-node), "
             "NODE[,NODE...] --delay-ms MS --jitter-ms MS --loss-pct PCT (degrade-link); "
             "none for heal. Any other parameter of the fault as --name VALUE.")] = None,
    sources: str | None = typer.Option(None, "--from", help="block-port: only from these "
                                       "nodes (J,K); default every other node."),
    for_s: float | None = typer.Option(None, "--for", min=0.1, help="A fault held until "
                                       "healed (pause-node, partition, block-port, slow-node, "
                                       "degrade-link): heal on its "
                                       "own after this many seconds."),
) -> None:
    """Inject a fault by hand into a running local or docker cluster, or heal them all: the
    scenarios' faults, applied now. Prints what it did and how to undo it; `rlsim status` lists
    the faults in force; `rlsim down` heals everything. Exit 0: done; 1: the backend failed doing
    it; 2: bad input."""
    from rlsim.faults.ledger import FaultError, apply

    check_name(name, "fault")
    try:
        positional, options = _split([*(args or []), *ctx.args])
        if sources is not None:
            options["from"] = sources
        done, undo = apply(name, action, positional, options, for_s)
    except FaultError as e:
        raise fail(f"rlsim fault: {e}", 2) from None
    except (RuntimeError, TimeoutError, OSError) as e:
        raise fail(f"rlsim fault: {action} failed: {e}", 1) from None
    console.print(f"{done}\nundo: {undo}", markup=False, highlight=False)


def _split(words: list[str]) -> tuple[list[str], dict[str, str]]:
    """Positional arguments, and ``--name VALUE`` options (a fault's other parameters)."""
    from rlsim.faults.ledger import FaultError

    positional, options, i = [], {}, 0
    while i < len(words):
        if words[i].startswith("--") and len(words[i]) > 2:
            key, eq, value = words[i][2:].partition("=")
            if not eq:
                if i + 1 >= len(words):
                    raise FaultError(f"--{key} needs a value")
                value, i = words[i + 1], i + 1
            options[key] = value
        else:
            positional.append(words[i])
        i += 1
    return positional, options
