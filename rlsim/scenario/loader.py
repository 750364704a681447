"""Read scenario files; a malformed one gives ``path:line: field: what is wrong``, no traceback."""

from __future__ import annotations

import re
from pathlib import Path

import yaml
from pydantic import ValidationError

from rlsim.scenario.schema import Scenario

REPO = Path(__file__).resolve().parents[2]
_PATH_IN_MSG = re.compile(r"^(\w+)\[(\d+)\](?:\.([\w.]+))?: ")


class ScenarioError(ValueError):
    """A scenario file that cannot be run; ``str()`` is one line per problem, ``path:line: ...``."""


def _lines(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict[tuple, int]:
    """Every key path of a YAML document -> its 1-based line."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out[(*path, key.value)] = key.start_mark.line + 1
            _lines(value, (*path, key.value), out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _lines(item, (*path, i), out)
    return out


def _where(loc: tuple, msg: str) -> tuple[tuple, str]:
    """Our own validators put the field path at the head of the message: use it as the loc."""
    m = _PATH_IN_MSG.match(msg)
    if m and len(loc) <= 2:
        loc = (m.group(1), int(m.group(2)), *(m.group(3).split(".") if m.group(3) else ()))
        msg = msg[m.end():]
    return loc, msg


def _line_of(lines: dict[tuple, int], loc: tuple) -> int:
    for n in range(len(loc), -1, -1):
        if loc[:n] in lines:
            return lines[loc[:n]]
    return 1


def _dotted(loc: tuple) -> str:
    out = ""
    for part in loc:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "<top level>"


def load(path: str | Path) -> Scenario:
    """Parse and validate one scenario file; raise :class:`ScenarioError` with every problem."""
    p = Path(path)
    try:
        text = p.read_text()
    except OSError as e:
        raise ScenarioError(f"{p}:1: cannot read the file ({e.strerror})") from None
    try:
        root = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        line = mark.line + 1 if mark else 1
        raise ScenarioError(f"{p}:{line}: not valid YAML: {getattr(e, 'problem', e)}") from None
    if not isinstance(data, dict):
        raise ScenarioError(f"{p}:1: a scenario is a mapping (name, cluster, trainer, faults, "
                            "expect), not a " + type(data).__name__)
    lines = _lines(root) if root is not None else {}
    try:
        scenario = Scenario.model_validate(data)
    except ValidationError as e:
        problems = []
        for err in e.errors():
            loc, msg = _where(tuple(err["loc"]), err["msg"].removeprefix("Value error, "))
            if err["type"] == "extra_forbidden":
                msg = "unknown key (see rlsim/scenario/schema.py for the vocabulary)"
            elif err["type"] == "missing":
                msg = "required, missing"
            problems.append(f"{p}:{_line_of(lines, loc)}: {_dotted(loc)}: {msg}")
        raise ScenarioError("\n".join(problems)) from None
    config = resolve(scenario.trainer.config)
    if not config.is_file():
        raise ScenarioError(f"{p}:{_line_of(lines, ('trainer', 'config'))}: trainer.config: "
                            f"no such trainer config {scenario.trainer.config!r} (looked for "
                            f"{config}); use a path under fixtures/trainer/")
    return scenario


def resolve(path: str) -> Path:
    """A path in a scenario: absolute, or relative to the repository root."""
    p = Path(path)
    return p if p.is_absolute() else REPO / p


def discover(root: str | Path) -> list[Path]:
    return sorted(Path(root).rglob("*.yaml"))
