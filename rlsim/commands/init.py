"""``rlsim init``: a starter for the user's own trainer in their project: two scenarios (a run
with no fault, and a worker node lost mid-run), the pytest configuration that collects them, and a
CI workflow. Every scenario it writes is read as ``rlsim validate`` reads it before anything is
written, so the starter passes as written."""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
import yaml

from rlsim.commands.console import console, fail
from rlsim.files import read_file, write_file
from rlsim.scenario.jsonschema import TITLE
from rlsim.scenario.jsonschema import text as schema_text

PYTEST_CONFIGS = ("pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg")
HERE = Path(".")
HEADER = "# written by rlsim init: a story of your trainer; edit it to tell yours\n"
SCHEMA = Path(".rlsim") / "scenario.schema.json"  # `rlsim schema`: an editor's completion
# the comment that points an editor's YAML language server (VS Code's YAML extension, others)
# at the schema, relative to the scenario that carries it
MODELINE = "# yaml-language-server: $schema=../.rlsim/scenario.schema.json\n"


def init(
    folder: Annotated[Path, typer.Argument(help="Your project's folder (made if missing).")] = HERE,
    adapter: str = typer.Option("rlsim", help="How rlsim reads your trainer: rlsim (the "
                                "reference trainer, the default), events, plain (a program "
                                "that writes no rlsim events), ray_train, verl, openrlhf or "
                                "nemo_rl."),
    command: str | None = typer.Option(None, help="How your trainer starts, as you would type "
                                       "it in a shell in FOLDER (split as the shell would); "
                                       "python is rlsim's own interpreter, with Ray."),
    force: bool = typer.Option(False, "--force", help="Replace files rlsim init wrote before."),
) -> None:
    """Write a starter into FOLDER: scenarios/clean_run.yaml and scenarios/node_lost.yaml, the
    scenario files' JSON Schema (.rlsim/scenario.schema.json, which the scenarios point an editor
    at), a pytest.ini that collects them (unless a pytest configuration is there), and
    .github/workflows/rlsim.yml. Exit 0: written; 2: bad input (nothing written)."""
    from rlsim.adapters import ADAPTERS
    from rlsim.scenario.loader import ScenarioError, read

    if adapter not in ADAPTERS:
        raise fail(f"rlsim init: --adapter {adapter}: unknown; fix: one of "
                   f"{', '.join(ADAPTERS)}", 2)
    argv = _argv(adapter, command)
    stories = {"clean_run": _clean(adapter, argv), "node_lost": _node_lost(adapter, argv)}

    files = {Path("scenarios") / f"{name}.yaml": MODELINE + HEADER + yaml.safe_dump(
        story, sort_keys=False, width=100, default_flow_style=None)
        for name, story in stories.items()}
    files[SCHEMA] = schema_text()
    if not any((folder / c).exists() for c in PYTEST_CONFIGS):
        files[Path("pytest.ini")] = PYTEST_INI
    files[Path(".github") / "workflows" / "rlsim.yml"] = WORKFLOW
    if problem := _path_problem(folder, files, force):
        raise fail(f"rlsim init: {problem}", 2)
    def check() -> None:  # read as rlsim validate will read them, where they are
        for rel, text in files.items():
            if rel.suffix == ".yaml":
                read(text, folder / rel)

    try:
        _write_all(folder, files, check)
    except ScenarioError as e:
        raise fail(f"rlsim init: the starter would not run as written: {e}; nothing was "
                   "written", 2) from None
    except OSError as e:
        raise fail(f"rlsim init: {e.filename or folder}: {e.strerror or e}; "
                   "nothing was written; fix: init a folder you can write", 2) from None
    for rel in files:
        console.print(f"wrote {folder / rel}", markup=False, highlight=False)
    if Path("pytest.ini") not in files:
        console.print(f"{folder} has a pytest configuration: add rlsim_scenarios = "
                      "scenarios/**/*.yaml to it (the default already collects scenarios/)",
                      markup=False, highlight=False)
    console.print(f"next: cd {folder} && rlsim run scenarios  (or: python -m pytest)",
                  markup=False, highlight=False)


MARKER = "# written by rlsim init"


def _init_wrote(path: Path) -> bool:
    """Whether ``path`` is a file rlsim init wrote: its first lines say so (the schema, JSON,
    is rlsim's scenario schema). --force replaces only those, never a file of the user's that
    happens to have the same name."""
    text = read_file(path, limit=1 << 24).decode(errors="replace")
    if path.suffix == ".json":
        try:
            return json.loads(text).get("title") == TITLE
        except (ValueError, AttributeError):
            return False
    return MARKER in "\n".join(text.splitlines()[:3])


def _path_problem(folder: Path, files: dict[Path, str], force: bool) -> str | None:
    """Why init must not write ``files`` under ``folder``, checked before anything is written:
    a symlink anywhere on the way (a planted ``scenarios -> elsewhere`` would send the files
    there), something other than a folder where one goes or other than a regular file where a
    file goes, a file already there (without ``--force``; with it, one init did not write)."""
    if os.path.islink(folder) and not folder.exists():
        return f"{folder} is a dangling symlink; fix: init a folder, or remove the link"
    if folder.exists() and not folder.is_dir():
        return f"{folder} is not a folder; fix: init a folder (made if missing)"
    there = []
    for rel in files:
        for depth in range(1, len(rel.parts) + 1):
            path = folder.joinpath(*rel.parts[:depth])
            try:
                mode = os.lstat(path).st_mode
            except FileNotFoundError:
                break
            last = depth == len(rel.parts)
            if stat.S_ISLNK(mode):
                return (f"{path} is a symlink; rlsim init writes only into folders and files of "
                        "the project itself; fix: remove the link, or init another folder")
            if not last and not stat.S_ISDIR(mode):
                return f"{path} is not a folder, where init writes {rel}; fix: move it away"
            if last and not stat.S_ISREG(mode):
                return f"{path} is not a regular file, where init writes one; fix: move it away"
            if last:
                there.append(path)
    if there and not force:
        return (f"{', '.join(map(str, there))} already there; fix: --force to replace what "
                "rlsim init wrote, or init another folder")
    for path in there:
        if not _init_wrote(path):
            return (f"{path} was not written by rlsim init (it lacks the line `# written by "
                    "rlsim init`): --force replaces only init's own files; fix: move it away")
    return None


def _write_all(folder: Path, files: dict[Path, str], check: Callable[[], None]) -> None:
    """Write every file, then ``check`` them, or leave nothing: what was made (folders, files) is
    removed again, and a file init replaced put back, when a write or the check fails."""
    made: list[Path] = []
    kept: dict[Path, bytes] = {}
    try:
        for parent in reversed([folder, *folder.parents]):
            if not parent.exists():
                parent.mkdir()
                made.append(parent)
        for rel, text in files.items():
            for parent in reversed([folder / p for p in [*rel.parents][:-1]]):
                if not parent.exists():
                    parent.mkdir()
                    made.append(parent)
            path = folder / rel
            if path.exists():
                kept[path] = read_file(path)
            else:
                made.append(path)
            write_file(path, text)
        check()
    except BaseException:
        for path, old in kept.items():
            with contextlib.suppress(OSError):
                write_file(path, old)
        for path in reversed(made):
            with contextlib.suppress(OSError):
                path.rmdir() if path.is_dir() else path.unlink()
        raise


def _argv(adapter: str, command: str | None) -> list[str] | None:
    if adapter == "rlsim":
        if command is not None:
            raise fail("rlsim init: --command: the reference trainer starts from its config; "
                       "drop --command, or name the adapter of your trainer", 2)
        return None
    if not command:
        raise fail(f"rlsim init: --adapter {adapter} needs --command: how your trainer starts, "
                   "e.g. --command 'python train.py --steps 20'", 2)
    try:
        argv = shlex.split(command)
    except ValueError as e:
        raise fail(f"rlsim init: --command {command!r}: {e}; quote it as a shell would", 2) \
            from None
    if not argv:
        raise fail("rlsim init: --command is empty; give how your trainer starts", 2)
    if argv[0] in ("python", "python3"):  # rlsim's interpreter: the one with Ray and rlsim
        argv[0] = "{python}"
    return argv


def _trainer(adapter: str, argv: list[str] | None, overrides: dict) -> dict:
    if argv is None:
        return {"config": "grpo_tiny", "overrides": overrides}
    # the command runs where it was typed: the project's folder, above scenarios/
    return {"adapter": adapter, "command": argv, "cwd": ".."}


def _clean(adapter: str, argv: list[str] | None) -> dict:
    return {
        "name": "clean_run",
        "description": "The trainer runs start to end on a healthy simulated cluster: what "
                       "every other story is measured against.",
        "cluster": {"nodes": 3, "gpus_per_node": 1},
        "trainer": _trainer(adapter, argv, {"total_steps": 10, "save_freq": 4}),
        "expect": [{"completes": True}, {"no_leaks": True}]
        + ([{"final_step": 10}] if argv is None else []),
    }


def _node_lost(adapter: str, argv: list[str] | None) -> dict:
    trainer = _trainer(adapter, argv, {"total_steps": 10, "save_freq": 4})
    if argv is None:  # the reference trainer rebuilds on the spare node from its checkpoint
        expect = [{"completes": True}, {"restarts": {"min": 1}}, {"resumed_from_step": 4},
                  {"detected_within_s": 30}, {"final_step": 10}, {"no_leaks": True}]
        why = ("It must notice within seconds, rebuild on the spare node from its step-4 "
               "checkpoint and finish.")
    else:  # a trainer of its own: relaunched as a scheduler would, it must finish
        trainer["relaunch"] = {"max": 2}
        expect = [{"completes": True}, {"detected_within_s": 60}, {"no_leaks": True}]
        why = ("It may fail; relaunched as a scheduler would (up to twice), it must finish. "
               "Tighten the expectations to what your trainer promises.")
    # aimed at what the story means, the node of a training rank, wherever Ray placed it; a
    # trainer that logs no worker table is aimed by index (rlsim fails the run if that node held
    # none of its actors: give trainer.roles and aim by role)
    aim = {"role": "actor", "rank": 1} if argv is None else \
        {"role": "worker", "rank": 1} if adapter == "ray_train" else {"node": 1}
    who = "The node of a training rank other than the first dies" if "role" in aim else \
        "A worker node dies"
    from rlsim.adapters import ADAPTERS

    # a program that logs no steps (adapter plain) is met at a time; give it trainer.marks and
    # wait on a line of its output instead
    at, when = ({"event": "step_end", "step": 5}, "after the trainer's step 5") \
        if "step_end" in ADAPTERS[adapter].observes else ({"seconds": 20}, "20 s into the run")
    return {
        "name": "node_lost",
        "description": f"{who} {when}. {why}",
        "cluster": {"nodes": 3, "gpus_per_node": 1},
        "trainer": trainer,
        "faults": [{"at": at, "kill_node": aim}],
        "expect": expect,
    }


PYTEST_INI = """\
# written by rlsim init: pytest collects the rlsim scenarios (one test each)
[pytest]
rlsim_scenarios = scenarios/**/*.yaml
addopts = -ra
"""

WORKFLOW = """\
# written by rlsim init: the scenarios on every push, their report kept as an artifact
name: rlsim
on: [push, pull_request]
jobs:
  scenarios:
    runs-on: ubuntu-latest
    timeout-minutes: 60
    steps:
      - uses: actions/checkout@v4
      - uses: actions/setup-python@v5
        with: {python-version: "3.11"}
      - name: set up (the CPU build of torch, then rlsim and your project)
        run: |
          python -m pip install torch --index-url https://download.pytorch.org/whl/cpu
          python -m pip install rlsim
      - name: scenarios (as root, for the network faults' iptables rules)
        run: sudo -E env "PATH=$PATH" python -m pytest scenarios -q --rlsim-report reports
      - uses: actions/upload-artifact@v4
        if: always()
        with: {name: rlsim-report, path: reports/}
"""
