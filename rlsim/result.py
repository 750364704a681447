"""One scenario's result: made once by the run that judged it (:func:`rlsim.scenario.runner.play`),
written once (``<scenario>/verdicts.json``, and its entry in ``summary.json``), and read as this one
type by every consumer: ``rlsim run``'s lines, the pytest plugin's failure, the report, the
sign-off page and JUnit (as pytest makes one report object per test and every consumer reads it).

Within one process a result is handed on, never re-read from its file; a later process (``rlsim
report DIR``, the xdist controller) reads the files through :func:`read_results`, which refuses a
record of the wrong shape naming the file, the field and the fix.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, TypeAdapter, ValidationError, field_validator

from rlsim.files import FileRefused, read_file, write_file
from rlsim.goodput import of_outcome
from rlsim.history import Outcome


@dataclass
class Verdict:
    """One check's judgement: whether it held, a sentence in the scenario's words, the figure
    measured (seconds, steps) and the history lines that show it."""

    check: str
    ok: bool
    message: str
    value: float | None = None
    evidence: list[str] = field(default_factory=list)


@dataclass
class ScenarioResult:
    """One scenario as judged: its checks' verdicts, whether all held, how long it took; in the
    process that ran it also the history it was judged from (``outcome``, never written)."""

    scenario: str
    ok: bool
    seconds: float
    checks: list[Verdict]
    outcome: Outcome | None = field(default=None, repr=False, compare=False)
    # the run's goodput figures (rlsim.goodput), measured of every run with steps, checked or not
    goodput: dict[str, Any] | None = None

    @classmethod
    def of(cls, name: str, verdicts: list[Verdict], seconds: float,
           outcome: Outcome | None = None) -> ScenarioResult:
        measured = of_outcome(outcome) if outcome is not None else None
        return cls(name, all(v.ok for v in verdicts), round(seconds, 2), verdicts, outcome,
                   measured)

    @property
    def failed(self) -> list[Verdict]:
        return [v for v in self.checks if not v.ok]

    def figures(self, columns) -> dict[str, float]:
        """The values its checks measured of the checks named in ``columns`` (those whose value
        is a figure, :data:`rlsim.checks.FIGURES`), by check."""
        out = {v.check: v.value for v in self.checks
               if v.check in columns and v.value is not None}
        if "goodput" in columns and "goodput" not in out and self.goodput and \
                _number(self.goodput.get("goodput")):
            out["goodput"] = self.goodput["goodput"]  # every run's, checked or not
        return out

    def record(self) -> dict[str, Any]:
        """The result as written: ``verdicts.json``, one entry of ``summary.json``."""
        return {"scenario": self.scenario, "ok": self.ok, "seconds": self.seconds,
                "checks": [{"check": v.check, "ok": v.ok, "message": v.message, "value": v.value}
                           for v in self.checks],
                **({"goodput": self.goodput} if self.goodput else {})}

    def write(self, path: Path) -> None:
        write_file(path, json.dumps(self.record(), indent=1))


def _number(v) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def write_summary(root: Path, results: list[ScenarioResult]) -> Path:
    """``<root>/summary.json``: every result of a run, in order."""
    root.mkdir(parents=True, exist_ok=True)
    return write_file(root / "summary.json", json.dumps([r.record() for r in results], indent=1))


def figure_text(v) -> str:
    """A figure as people read it on a page (seconds to the hundredth, counts whole); the report
    and the sign-off page print it the same way. Machine-read outputs (JUnit, JSON) keep every
    digit."""
    return f"{v:.2f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)


class ResultInputError(ValueError):
    """A report folder's record does not parse or has the wrong shape; the message names the
    file, the field and the fix."""


class _Check(BaseModel):
    check: str
    ok: bool
    message: str
    value: float | None = None

    @field_validator("value")
    @classmethod
    def _finite(cls, v: float | None) -> float | None:
        if v is not None and not math.isfinite(v):
            raise ValueError("a figure is a finite number")
        return v


class _Record(BaseModel):
    scenario: str = Field(pattern=r"^[^/\\\x00]+$")  # a folder name under the root
    ok: bool
    seconds: float = Field(ge=0)
    checks: list[_Check]
    goodput: dict[str, float | int | str | None] | None = None

    @field_validator("goodput")
    @classmethod
    def _figures(cls, v: dict | None) -> dict | None:
        if v is not None and not all(x is None or isinstance(x, str) or _number(x)
                                     for x in v.values()):
            raise ValueError("goodput's figures are finite numbers")
        return v

    @field_validator("scenario")
    @classmethod
    def _folder(cls, v: str) -> str:
        if v in (".", ".."):
            raise ValueError("a scenario's name is a folder under the report, not . or ..")
        return v

    @field_validator("seconds")
    @classmethod
    def _finite(cls, v: float) -> float:
        if not math.isfinite(v):
            raise ValueError("seconds is a finite number")
        return v


def read_results(root: Path) -> list[ScenarioResult]:
    """The results in a report folder: ``summary.json`` (``rlsim run --report``), or each
    scenario's ``verdicts.json`` (pytest); ResultInputError naming the file and the field when
    one does not hold such records."""
    if os.path.lexists(root / "summary.json"):
        return [_result(r) for r in _records(root / "summary.json", list[_Record])]
    return [_result(_records(p, _Record)) for p in sorted(root.glob("*/verdicts.json"))]


def _result(r: _Record) -> ScenarioResult:
    return ScenarioResult(r.scenario, r.ok, r.seconds,
                          [Verdict(c.check, c.ok, c.message, c.value) for c in r.checks],
                          goodput=r.goodput)


def _records(path: Path, shape):
    fix = "fix: write the folder again with `rlsim run --report DIR`"
    try:
        data = json.loads(read_file(path))
    except FileRefused as e:
        raise ResultInputError(f"{e}; {fix}") from None
    except (OSError, UnicodeDecodeError, ValueError) as e:
        raise ResultInputError(f"{path}: not readable JSON ({type(e).__name__}: "
                               f"{str(e)[:200]}); {fix}") from None
    try:  # strict: "ok": "false" is no verdict
        return TypeAdapter(shape).validate_python(data, strict=True)
    except ValidationError as e:
        first = e.errors()[0]
        where = ".".join(str(x) for x in first["loc"]) or "(the whole file)"
        raise ResultInputError(f"{path}: {where}: {first['msg']}; {fix}") from None
