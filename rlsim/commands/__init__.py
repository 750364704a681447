"""The ``rlsim`` command line. One module per command group, each parsing its options, calling the
engine and printing (:mod:`~rlsim.commands.cluster`, :mod:`~rlsim.commands.doctor`,
:mod:`~rlsim.commands.demo`, :mod:`~rlsim.commands.fault`, :mod:`~rlsim.commands.scenarios`,
:mod:`~rlsim.commands.plan`, :mod:`~rlsim.commands.launch`, :mod:`~rlsim.commands.ray`); here
they are put together into one app, and the process's signals handled."""

from __future__ import annotations

import contextlib
import faulthandler
import functools
import signal
import sys

import typer

from rlsim.commands import cluster, demo, doctor, fault, init, launch, plan, ray, scenarios
from rlsim.commands.console import err, fail
from rlsim.files import FileRefused
from rlsim.host.home import HomeError
from rlsim.registry import RegistryError

app = typer.Typer(no_args_is_help=True, add_completion=False,
                  help="Rehearse multi-node RL training failures on simulated Ray clusters.")


def _version(shown: bool) -> None:
    if shown:
        from importlib.metadata import version

        typer.echo(f"rlsim {version('rlsim')}")
        raise typer.Exit(0)


@app.callback()
def _options(version: bool = typer.Option(False, "--version", callback=_version, is_eager=True,
                                          help="Print rlsim's version and exit.")) -> None:
    """Rehearse multi-node RL training failures on simulated Ray clusters."""


# What a command refuses with the path, or the plugin, and the fix in its message: a home or a
# plugin that cannot serve, a file rlsim must not write or read. Each ends its command with exit 2,
# whichever command met it.
REFUSALS = (HomeError, RegistryError, FileRefused)


def _refusing(command):
    @functools.wraps(command)  # typer reads the options from the wrapped signature
    def run(*args, **kwargs):
        try:
            return command(*args, **kwargs)
        except REFUSALS as e:
            raise fail(f"rlsim {command.__name__}: {e}", 2) from None

    return run


for command in (cluster.cluster, cluster.status, cluster.down, doctor.doctor, demo.demo,
                scenarios.run, scenarios.validate, scenarios.report, scenarios.schema,
                launch.launch, init.init, ray.ray):
    app.command()(_refusing(command))
for command in (fault.fault, plan.plan):  # take options of their own after the arguments
    app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True})(
        _refusing(command))


_signalled: list[int] = []

def _on_sigterm(signum, frame) -> None:
    """SIGTERM unwinds the command as Ctrl-C does (see :func:`main`); a second one (a scheduler
    and its step daemon both signal) must not interrupt the healing the first one started."""
    _signalled.append(signum)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt

def main(argv: list[str] | None = None) -> None:
    """The ``rlsim`` entry point. Leftovers of abandoned clusters are reaped by the commands that
    start or stop clusters, never by the ones that only read (``status``, ``validate``).

    SIGTERM (a scheduler's cancel, ``timeout``, ``kill``) ends any command as Ctrl-C does: on the
    way out it heals the faults it injected and stops the clusters it started (Python's default
    would die at once and leave them to the next command's reaping). A command it ends with an
    error exits 143."""
    signal.signal(signal.SIGTERM, _on_sigterm)
    # A blocked signal is inherited through exec: Ray blocks SIGINT in every process it starts
    # (ray._private.services.start_ray_process), so an rlsim started from one of them (a Ray job's
    # entrypoint, a task) would hold a Ctrl-C pending for good and heal nothing. A signal the
    # parent *ignores* stays ignored, as a shell wants of a background job (`rlsim run ... &`)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})
    # `kill -USR1 <pid>`: every thread's stack on stderr, the run goes on (a run that seems stuck)
    if sys.__stderr__ is not None:
        with contextlib.suppress(ValueError, OSError):
            faulthandler.register(signal.SIGUSR1, file=sys.__stderr__, all_threads=True)
    try:
        app(args=argv, prog_name="rlsim")
    except REFUSALS as e:  # met outside a command (a plugin loaded as the app is built)
        err.print(f"rlsim: {e}", style="red", markup=False, highlight=False, soft_wrap=True)
        sys.exit(2)
    except SystemExit as e:
        # ray.init() puts in a SIGTERM handler of its own, sys.exit(15): the same unwinding
        if (_signalled and e.code not in (0, None)) or e.code == signal.SIGTERM:
            err.print("rlsim: stopped by SIGTERM; what it had started is stopped",
                      markup=False, highlight=False)
            sys.exit(143)
        raise
