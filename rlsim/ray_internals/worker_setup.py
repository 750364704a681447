"""What a simulated node's raylet runs to start a Python worker, in place of Ray's
``setup_worker.py`` (``RayParams.setup_worker_path``): ``python worker_setup.py
--serialized-runtime-env-context=JSON --language=PYTHON [python flags] default_worker.py ARGS``.

Ray's own script does one thing for a worker without a runtime environment: it execs ``python
default_worker.py ARGS`` through ``bash -c``, with the context's environment variables set. To
get there it imports Ray's services, logging and protobufs: 0.7 s of CPU per worker on this
machine, paid again by every worker a node starts, before the worker's own imports. This script
imports nothing beyond the standard library and execs the same command directly; a context it
does not handle exactly as Ray would (a command prefix for conda or a container, another
interpreter, another entry point, a language other than Python) goes to Ray's own script,
unchanged.

Where the cluster runs a zygote (``RLSIM_ZYGOTE``, :mod:`rlsim.backends.zygote`), a worker run as
``python SCRIPT ARGS`` is forked from it instead of exec'd: this process hands over its streams
and stays until the worker exits, with its status. No zygote answering: the exec, as above.

A node's agents start here too: ``python worker_setup.py --rlsim-agent -u SCRIPT ARGS`` (or ``-u
-m MODULE ARGS``), the raylet's ``--dashboard_agent_command`` and ``--runtime_env_agent_command``
as :mod:`rlsim.backends.node_start` rewrites them. The agent is forked from the cluster's agent
zygote (``RLSIM_AGENT_ZYGOTE``) the same way, or exec'd as ``python -u ...`` where none answers.

Must stay importable without rlsim or Ray on the path: the raylet runs it as a file.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import sys

_VAR = re.compile(r"\$(\w+|\{[^}]*\})", re.ASCII)  # what os.path.expandvars expands
ZYGOTE_VAR = "RLSIM_ZYGOTE"  # where the cluster's zygote listens (rlsim.backends.zygote)
AGENT_ZYGOTE_VAR = "RLSIM_AGENT_ZYGOTE"  # where the one forking the nodes' agents listens
AGENT_FLAG = "--rlsim-agent"
# after AGENT_FLAG: the agent (Ray's dashboard) gets its forkserver forked before it starts
FORKSERVER_FLAG = "--rlsim-forkserver"
MAX_REQUEST = 1 << 20
RAYS_OWN = "ray/_private/workers/setup_worker.py"  # under the directory holding the ray package


def _option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    """The value of ``--name=VALUE`` or ``--name VALUE`` in ``argv`` (the first), and ``argv``
    without it (what argparse's parse_known_args leaves for the worker)."""
    rest, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if value is None and arg == f"--{name}" and i + 1 < len(argv):
            value, i = argv[i + 1], i + 2
            continue
        if value is None and arg.startswith(f"--{name}="):
            value, i = arg.split("=", 1)[1], i + 1
            continue
        rest.append(arg)
        i += 1
    return value, rest


def plan(argv: list[str], environ: dict[str, str]) -> tuple[list[str], dict[str, str]] | None:
    """The command to exec and its environment, or None when Ray's own script must decide."""
    context_text, rest = _option(argv, "serialized-runtime-env-context")
    language, rest = _option(rest, "language")
    if language != "PYTHON":
        return None
    try:
        context = json.loads(context_text or "{}")
    except ValueError:
        return None
    if not isinstance(context, dict) or set(context) - {
            "command_prefix", "env_vars", "py_executable", "override_worker_entrypoint",
            "java_jars"}:
        return None
    if context.get("command_prefix") or context.get("override_worker_entrypoint"):
        return None
    python = context.get("py_executable") or sys.executable
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return None
    env = dict(environ)
    for key, value in (context.get("env_vars") or {}).items():
        # as Ray's update_envs: $X and ${X} expand from the environment so far (os.path's
        # expandvars), then unknown ones in braces become empty
        expanded = _VAR.sub(lambda m: env.get(m.group(1).strip("{}"), m.group(0)), value)
        env[key] = re.sub(r"\$\{[A-Z0-9_]+\}", "", expanded)
    return [python, *rest], env


def _answer(line: str) -> dict:
    """A line of the zygote's answer: ``{"pid": N}``, ``{"status": N}`` or ``{"error": WHY}``
    (:mod:`rlsim.backends.zygote_guard`); a line that is none of them, as an error."""
    try:
        answer = json.loads(line)
    except ValueError:
        answer = None
    return answer if isinstance(answer, dict) else {"error": f"not an answer: {line[:80]!r}"}


def run_forked(path: str, argv: list[str], env: dict[str, str], *,
               forkserver: bool = False) -> int | None:
    """Run ``python argv...`` as a child of the zygote listening at ``path``, with this
    process's standard streams; its exit status (as a shell reports it), or None when no
    zygote answers (the caller then execs the worker itself). Signals this process gets
    (the raylet's SIGTERM) are passed on to the worker. ``forkserver``: the child forks its
    multiprocessing forkserver before it runs ``argv``."""
    # Signals are caught from the start: one sent before the zygote has said which pid it
    # forked (the raylet ending a worker it just started) is held and passed on once it has,
    # instead of killing this process and leaving the worker to the zygote's cleanup
    held: list[int] = []
    pid = None

    def forward(signum, _frame):
        if pid is None:
            held.append(signum)
            return
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signum)

    forwarded = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT)
    for sig in forwarded:
        signal.signal(sig, forward)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(path)
        request = {"argv": argv, "env": env, "cwd": os.getcwd()}
        if forkserver:
            request["forkserver"] = True
        request = json.dumps(request).encode()
        socket.send_fds(sock, [len(request).to_bytes(4, "big") + request], [0, 1, 2])
        reader = sock.makefile("r")
        first = reader.readline()
    except OSError:
        first = ""
    if first and "pid" not in (answer := _answer(first)):  # refused: nothing started
        print(f"rlsim worker_setup: the zygote at {path} refused: {answer.get('error')}",
              file=sys.stderr, flush=True)
        first = ""
    if not first:  # the zygote forked nothing (it failed to, or died): nothing started yet
        sock.close()
        for sig in forwarded:
            signal.signal(sig, signal.SIG_DFL)
        for sig in held:  # a signal meant for the worker ends this process as it would have
            os.kill(os.getpid(), sig)
        return None
    pid = json.loads(first)["pid"]
    for sig in held:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    last = reader.readline()
    status = json.loads(last)["status"] if last else 1
    return status if status >= 0 else 128 - status


def run_agent(args: list[str]) -> None:
    """Run a node's agent, ``python ARGS`` (``-u SCRIPT ...`` or ``-u -m MODULE ...``): forked
    from the agent zygote, this process staying as the raylet's child until the agent exits,
    or exec'd where no agent zygote answers. ``--rlsim-forkserver ARGS``: forked with its
    forkserver (:mod:`rlsim.ray_internals.forkserver`)."""
    forkserver = args[:1] == [FORKSERVER_FLAG]
    args = args[1:] if forkserver else args
    path = os.environ.get(AGENT_ZYGOTE_VAR)
    if path:
        status = run_forked(path, args, dict(os.environ), forkserver=forkserver)
        if status is not None:
            sys.exit(status)
    os.execv(sys.executable, [sys.executable, *args])


def main() -> None:
    argv = sys.argv[1:]
    if argv[:1] == [AGENT_FLAG]:
        run_agent(argv[1:])
    planned = plan(argv, dict(os.environ))
    if planned is None:
        import ray  # only here: the rare worker this script leaves to Ray
        own = os.path.join(os.path.dirname(os.path.dirname(ray.__file__)), RAYS_OWN)
        os.execv(sys.executable, [sys.executable, own, *argv])
    command, env = planned
    zygote = env.get(ZYGOTE_VAR)
    # a worker run as `python SCRIPT ARGS` (no interpreter flags) can be forked instead
    if zygote and len(command) > 1 and command[1].endswith(".py"):
        status = run_forked(zygote, command[1:], env)
        if status is not None:
            sys.exit(status)
    os.execve(command[0], command, env)


if __name__ == "__main__":
    main()
