"""``rlsim fault NAME ACTION``: chaos by hand on a running cluster (:mod:`rlsim.faults.ledger`)."""

from __future__ import annotations

from typing import Annotated

import typer

from rlsim.commands.console import check_name, console, fail


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

    check_name(name, "fault")
    try:
        done, undo = apply(name, action, list(args or []), sources, for_s)
    except FaultError as e:
        raise fail(f"rlsim fault: {e}", 2) from None
    except (RuntimeError, TimeoutError, OSError) as e:
        raise fail(f"rlsim fault: {action} failed: {e}", 1) from None
    console.print(f"{done}\nundo: {undo}", markup=False, highlight=False)
