"""Read scenario files; a malformed one gives ``path:line: field: what is wrong``, no traceback.

A scenario file is read as untrusted input, in bounded time and memory: at most ``MAX_BYTES``,
UTF-8, one YAML document parsed once (libyaml when installed) into a node tree built here without
recursion, so nesting deeper than ``MAX_DEPTH`` is refused before anything recurses over it.
Anchors and aliases are refused (an alias bomb expands a few lines into gigabytes), so are
duplicate keys (YAML would keep the last one silently) and numbers that are infinite, NaN or
beyond ``MAX_NUMBER``. A file that passes the schema is then checked against the trainer config
it names, with its overrides, the way the runner will start the trainer: a typo is caught here,
before any cluster starts.
"""

from __future__ import annotations

import errno
import math
import re
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError
from yaml import events as ev
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from rlsim.adapters import ADAPTERS
from rlsim.adapters.base import TrainerProblem, resolve
from rlsim.fields import World
from rlsim.files import FileRefused, read_file, shown
from rlsim.scenario.schema import OVERRIDE_KEY, Scenario

MAX_BYTES = 1 << 20
MAX_DEPTH = 64
MAX_NUMBER = 1e15
_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
BOOL_TAG, STR_TAG = "tag:yaml.org,2002:bool", "tag:yaml.org,2002:str"
_PATH_IN_MSG = re.compile(r"^(\w+)\[(\d+)\](?:\.([\w.]+))?: ")
_FIELD_IN_MSG = re.compile(r"^(\w+(?:\.\w+)+): ")


class ScenarioError(ValueError):
    """A scenario file that cannot be run; ``str()`` is one line per problem, ``path:line: ...``."""


def load(path: str | Path, overrides: dict[str, Any] | None = None,
         option: str = "--override") -> Scenario:
    """Parse and validate one scenario file; raise :class:`ScenarioError` with every problem.
    ``overrides`` (given as ``option``): more reference-trainer overrides, checked with the
    file."""
    p = Path(path)
    return read(_read(p), p, overrides, option)


def read(text: str, p: Path, overrides: dict[str, Any] | None = None,
         option: str = "--override") -> Scenario:
    """A scenario's ``text`` read as if it were the file ``p`` (its messages name ``p``, its
    paths are relative to ``p``'s folder): what :func:`load` does once the file is read.
    ``overrides`` are added to the reference trainer's before anything is checked, so that a
    run with them is held to what the file is (a fault at step 7 against total_steps=3 is
    refused, naming ``option``); a trainer of another adapter takes none."""
    data, lines = _parse(p, text)
    if data is None:
        raise ScenarioError(f"{shown(p)}:1: the file is empty; a scenario is a mapping (name, "
                            "cluster, "
                            "trainer, faults, expect): see scenarios/ for examples")
    if not isinstance(data, dict):
        raise ScenarioError(f"{shown(p)}:1: a scenario is a mapping (name, cluster, trainer, "
                            "faults, "
                            "expect), not a " + type(data).__name__)
    trainer = data.get("trainer")
    if overrides and isinstance(trainer, dict) and trainer.get("adapter", "rlsim") == "rlsim":
        given = trainer.get("overrides")
        data = {**data, "trainer": {**trainer, "overrides": {
            **(given if isinstance(given, dict) else {}), **overrides}}}
    try:
        try:
            scenario = Scenario.model_validate(data)
        except ValidationError as e:
            raise ScenarioError("\n".join(_schema_problem(p, lines, err)
                                          for err in e.errors())) from None
        resolve_paths(p, lines, scenario)
        _check_against_trainer(p, lines, scenario)
    except ScenarioError as e:
        if not overrides:
            raise
        given = ", ".join(f"{k}={v!r}" for k, v in overrides.items())
        raise ScenarioError(f"{e}\n{shown(p)}: (run with {option} {given})") from None
    return scenario


def read_value(text: str) -> Any:
    """One YAML value given outside a file (an ``--override``), read as a scenario file is:
    ScenarioError for what a scenario file may not hold (too deep, an anchor, two
    documents)."""
    data, _ = _parse(Path("--override"), text)
    return data


def resolve_paths(p: Path, lines: dict[tuple, int], sc: Scenario) -> None:
    """Every path the scenario gives, made absolute against the file's own folder (as compose
    files and CI workflows read theirs): the trainer's ``cwd`` (the folder itself by default; the
    command runs there, so its own relative arguments mean what they mean in a shell there) and
    what its adapter reads (the reference trainer's ``config`` when it is a file, not a preset).
    The one place a scenario's relative paths are resolved."""
    folder = p.resolve().parent
    try:
        workdir = resolve(sc.trainer.cwd or ".", folder).resolve()
    except (RuntimeError, OSError) as e:  # a symlink loop (RuntimeError before Python 3.13)
        raise ScenarioError(f"{shown(p)}:{_line_of(lines, ('trainer', 'cwd'))}: trainer.cwd: "
                            f"{sc.trainer.cwd!r} cannot be resolved ({e}); give a folder the "
                            "command can run in") from None
    if not workdir.is_dir():
        raise ScenarioError(f"{shown(p)}:{_line_of(lines, ('trainer', 'cwd'))}: trainer.cwd: "
                            f"{str(workdir)!r} is not a folder (it is relative to the scenario's "
                            "folder); give a folder the command can run in")
    sc.trainer.cwd = str(workdir)
    ADAPTERS[sc.trainer.adapter].resolve_paths(sc.trainer, folder)


def catalogue() -> Path:
    """The folder of rlsim's reference catalogue as installed (package data ``rlsim.catalogue``;
    in a checkout, its ``scenarios`` folder)."""
    import rlsim.catalogue

    return Path(rlsim.catalogue.__file__).resolve().parent


def discover(root: str | Path) -> list[Path]:
    """The ``.yaml`` files under ``root``, less those in hidden folders (as pytest does not look
    into them either): a tool's own state there is no scenario, e.g. the ``.hydra/config.yaml``
    Hydra writes under ``outputs/`` where a Hydra-configured trainer (verl) runs."""
    root = Path(root)
    return sorted(p for p in root.rglob("*.yaml")
                  if not any(part.startswith(".") for part in p.relative_to(root).parts[:-1]))




# -- reading and parsing ---------------------------------------------------------------------------
def _read(p: Path) -> str:
    try:
        raw = read_file(p, MAX_BYTES, follow=True)
    except FileNotFoundError:
        raise ScenarioError(f"{shown(p)}:1: no such file; give a scenario .yaml file or a "
                            "directory of "
                            "them") from None
    except FileRefused as e:
        if e.errno == errno.EFBIG:
            raise ScenarioError(f"{shown(p)}:1: larger than {MAX_BYTES // 1024} KiB, the limit "
                                "for a "
                                "scenario file (a real one is a few KiB): is this the right "
                                "file?") from None
        what = str(e).removeprefix(f"{p} is ").removesuffix("; give a file")
        raise ScenarioError(f"{shown(p)}:1: {what}; give a scenario .yaml file") from None
    except OSError as e:
        raise ScenarioError(f"{shown(p)}:1: cannot read the file ({e.strerror}); make it "
                            "readable by "
                            "this user") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        line = raw[:e.start].count(b"\n") + 1
        raise ScenarioError(f"{shown(p)}:{line}: not UTF-8 text (byte {e.start}): a binary file? A "
                            "scenario is a YAML text file") from None


def parse(text: str, where: str | Path = "<text>") -> object:
    """``text``'s Python value as a scenario file's is read (a plain on/off/yes/no key is that
    word, not a boolean); raises ScenarioError naming ``where``."""
    return _parse(Path(where), text)[0]


def _parse(p: Path, text: str) -> tuple[object, dict[tuple, int]]:
    """The document's Python value and the line of every key path in it."""
    loader = _Loader(text)
    try:
        root, lines = _compose(p, loader)
        return (loader.construct_document(root) if root is not None else None), lines
    except ScenarioError:
        raise
    except yaml.reader.ReaderError as e:
        raise ScenarioError(f"{shown(p)}:{text[:e.position].count(chr(10)) + 1}: not valid YAML: "
                            f"character #x{e.character:04x} at offset {e.position}: "
                            f"{e.reason}; remove it (a scenario is plain text)") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        problem = getattr(e, "problem", None) or getattr(e, "context", None) or str(e)
        if "nesting depth" in str(problem):  # libyaml's own limit (PyYAML >= 6.0.4), met first
            raise ScenarioError(_too_deep(p, mark.line + 1 if mark else 1)) from None
        raise ScenarioError(f"{shown(p)}:{mark.line + 1 if mark else 1}: not valid YAML: "
                            f"{' '.join(str(problem).split())}") from None
    except (ValueError, OverflowError) as e:  # a value that looks like a date but is none
        raise ScenarioError(f"{shown(p)}:1: not valid YAML: {e}") from None
    finally:
        loader.dispose()


def _too_deep(p: Path, line: int) -> str:
    return (f"{shown(p)}:{line}: nested more than {MAX_DEPTH} levels deep; a scenario is a few "
            "levels "
            "of mappings and lists")


def _compose(p: Path, loader) -> tuple[Node | None, dict[tuple, int]]:
    """Build the node tree from the parser's events, iteratively, refusing what ``load`` refuses.

    Each open collection is a frame ``[node, key path, pending mapping key, {key: line}]``."""
    root, lines, stack, docs = None, {(): 1}, [], 0
    while loader.check_event():
        e = loader.get_event()
        line = e.start_mark.line + 1
        if isinstance(e, ev.DocumentStartEvent):
            docs += 1
            if docs > 1:
                raise ScenarioError(f"{shown(p)}:{line}: a second YAML document (---); a "
                                    "scenario file "
                                    "holds one")
        elif isinstance(e, ev.AliasEvent):
            raise ScenarioError(f"{shown(p)}:{line}: alias *{e.anchor} is not allowed in a "
                                "scenario "
                                "file: write the value out in full")
        elif isinstance(e, ev.CollectionEndEvent):
            stack.pop()[0].end_mark = e.end_mark
        elif isinstance(e, ev.NodeEvent):
            if e.anchor is not None:
                raise ScenarioError(f"{shown(p)}:{line}: anchor &{e.anchor} is not allowed in a "
                                    "scenario file: write each value out in full")
            node = _node(loader, e)
            path = _attach(p, stack[-1], node, lines) if stack else ()
            if isinstance(node, ScalarNode):
                _check_number(p, loader, node, path)
                if "\0" in node.value:  # a path or a name cut short by every C API it reaches
                    raise ScenarioError(f"{shown(p)}:{line}: {_dotted(path)}: a NUL byte in a "
                                        "value "
                                        "(written \\0 or \\x00 in quotes); remove it")
            root = node if root is None else root
            if not isinstance(node, ScalarNode):
                if len(stack) >= MAX_DEPTH:
                    raise ScenarioError(_too_deep(p, line))
                stack.append([node, path, None, {}])
    return root, lines


def _attach(p: Path, frame: list, node: Node, lines: dict[tuple, int]) -> tuple:
    """Put ``node`` into its parent collection (``frame``); the node's key path. A mapping key's
    line is recorded under its path, and a key given twice is refused."""
    parent, path, key, seen = frame
    line = node.start_mark.line + 1
    if isinstance(parent, SequenceNode):
        child = (*path, len(parent.value))
        parent.value.append(node)
    elif key is None:  # this node is the next key
        frame[2] = node
        if isinstance(node, ScalarNode) and node.tag == BOOL_TAG and not node.style:
            # YAML 1.1 reads a plain on/off/yes/no as a boolean, and no key of a scenario is
            # one: `cluster: {on: HOST:PORT}` is the key "on", as a user reads it
            node.tag = STR_TAG
        if isinstance(node, ScalarNode):
            ident = (node.tag, node.value)
            if ident in seen:
                where = f"lines {seen[ident]} and {line}" if seen[ident] != line else "same line"
                raise ScenarioError(f"{shown(p)}:{line}: {_dotted(path)}: key {node.value!r} "
                                    "appears "
                                    f"twice ({where}): keep one")
            seen[ident] = line
            lines[(*path, node.value)] = line
        return path
    else:
        parent.value.append((key, node))
        frame[2] = None
        child = (*path, key.value) if isinstance(key, ScalarNode) else path
    lines.setdefault(child, line)
    return child


def _node(loader, e: ev.NodeEvent) -> Node:
    """The node for a scalar or collection start event, its tag resolved as yaml's composer does."""
    if isinstance(e, ev.ScalarEvent):
        tag = e.tag if e.tag not in (None, "!") else loader.resolve(ScalarNode, e.value, e.implicit)
        return ScalarNode(tag, e.value, e.start_mark, e.end_mark, style=e.style)
    kind = SequenceNode if isinstance(e, ev.SequenceStartEvent) else MappingNode
    tag = e.tag if e.tag not in (None, "!") else loader.resolve(kind, None, e.implicit)
    return kind(tag, [], e.start_mark, None, flow_style=e.flow_style)


def _check_number(p: Path, loader, node: ScalarNode, path: tuple) -> None:
    """Refuse an infinite, NaN or absurdly large number wherever it stands (``path``)."""
    if node.tag == "tag:yaml.org,2002:float":
        value = loader.construct_yaml_float(node)
    elif node.tag == "tag:yaml.org,2002:int":
        value = loader.construct_yaml_int(node)
    else:
        return
    if not math.isfinite(value) or abs(value) >= MAX_NUMBER:
        what = "not a finite number" if not math.isfinite(value) else "too large"
        raise ScenarioError(f"{shown(p)}:{node.start_mark.line + 1}: {_dotted(path)}: "
                            f"{node.value} is "
                            f"{what}; write a plain number (below {MAX_NUMBER:.0e})")


# -- reporting schema problems ---------------------------------------------------------------------
def _schema_problem(p: Path, lines: dict[tuple, int], err: dict) -> str:
    loc, msg = _where(tuple(err["loc"]), err["msg"].removeprefix("Value error, "))
    if err["type"] == "extra_forbidden":
        msg = "unknown key (see rlsim/scenario/schema.py for the vocabulary)"
    elif err["type"] == "missing":
        msg = "required, missing"
    return f"{shown(p)}:{_line_of(lines, loc)}: {_dotted(loc)}: {msg}"


def _where(loc: tuple, msg: str) -> tuple[tuple, str]:
    """Our own validators put the field path at the head of the message: use it as the loc."""
    m = _PATH_IN_MSG.match(msg)
    if m and len(loc) <= 2:
        loc = (m.group(1), int(m.group(2)), *(m.group(3).split(".") if m.group(3) else ()))
        msg = msg[m.end():]
    elif (m := _FIELD_IN_MSG.match(msg)) and loc and isinstance(loc[-1], int):
        loc, msg = (*loc, *m.group(1).split(".")), msg[m.end():]  # a fault's own parameter
    return loc, msg


def _line_of(lines: dict[tuple, int], loc: tuple) -> int:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return 1


def _dotted(loc: tuple) -> str:
    """``faults[0].kill_node.node``; a key that would not print as itself on one line (a line
    separator, a control character) is shown quoted, with escapes."""
    out = ""
    for part in loc:
        text = str(part) if str(part).isprintable() else repr(part)
        out += f"[{text}]" if isinstance(part, int) else (f".{text}" if out else text)
    return out or "<top level>"


# -- the scenario against its trainer --------------------------------------------------------------
def _check_against_trainer(p: Path, lines: dict[tuple, int], sc: Scenario) -> None:
    """What only the trainer knows, asked of its adapter (its config with the scenario's
    overrides, the program its command starts), and how many steps it runs."""
    refusals = [check.pattern for name, check in sc.checks() if name == "fails"]
    try:
        facts = ADAPTERS[sc.trainer.adapter].facts(sc.trainer, refusals)
    except TrainerProblem as e:
        raise ScenarioError(f"{shown(p)}:{_line_of(lines, e.where)}: {e.field}: {e}") from None
    if facts is None:  # refused, as the scenario expects
        return
    world = World(sc.cluster.nodes, facts.total_steps, facts.ranks, facts.steps_knob)
    found = sc.problems(world)  # steps never reached, roles and ranks the run does not have
    if found:
        raise ScenarioError("\n".join(f"{shown(p)}:{_line_of(lines, _key_path(where))}: "
                                      f"{where}: {said}"
                                       for where, said in found))


def _key_path(where: str) -> tuple:
    """``faults[2].at.step`` -> ("faults", 2, "at", "step"), for the line of a field."""
    return tuple(int(part) if part.isdigit() else part
                 for part in where.replace("[", ".").replace("]", "").split("."))


def parse_overrides(items: list[str], option: str = "--override") -> dict[str, Any]:
    """``KEY=VALUE`` words (``--override``; ``option`` names the option as the front end takes
    it, such as the plugin's ``--rlsim-override``) as reference-trainer overrides, values read
    as YAML by the scenario file's own reader (its depth limit, no anchors, no second
    document); ValueError naming the option, the word and the fix. Applied where a scenario is
    read (:func:`rlsim.scenario.loader.load`), so that they are checked as the file is."""
    out: dict[str, Any] = {}
    for item in items:
        key, eq, value = item.partition("=")
        if not eq or not OVERRIDE_KEY.match(key):
            raise ValueError(f"{option} {item[:200]!r}: write KEY=VALUE with a dotted config "
                             f"key, e.g. {option} step_delay_s=0.1")
        try:
            out[key] = read_value(value)
        except ScenarioError as e:
            problem = str(e).partition(": ")[2]
            raise ValueError(f"{option} {key}: {problem}") from None
    return out
