"""The base of the checks: :class:`Check` (a parameter model and its judge side by side), the
registry :data:`CHECKS`, the decorator :func:`check` that makes one, the scalar shorthands
(``restarts: 1`` for ``restarts: {min: 1, max: 1}``), and what more than one family of checks
reads of a history: the timeline lines a verdict shows, the first disruptive fault, the restarts,
a stall and the twin, in words. The checks live one module per family beside this one.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import ValidationError

from rlsim.fields import Strict, World, first_error
from rlsim.files import shown
from rlsim.history import Outcome, is_number
from rlsim.registry import Registry
from rlsim.result import Verdict


@dataclass(frozen=True)
class Check:
    """One check: its parameters, its judge, and how a scalar shorthand reads (None: no
    shorthand; the function gets the scalar and returns the long form's mapping, or raises
    ValueError saying what to write)."""

    name: str
    Params: type[Strict]
    judge: Callable[[Outcome, Any], Verdict]
    scalar: Callable[[str, Any], dict] | None = None
    # trainer event types (or "metrics.jsonl") the judge reads: a scenario whose adapter cannot
    # observe them is refused when read (rlsim.adapters)
    needs: tuple[str, ...] = ()
    # the column head of its value where that is a figure people compare across runs and
    # clusters (seconds to detect, to recover, to a failure; restarts): reports and JUnit
    # properties carry it
    figure: str | None = None
    # checks that cannot hold in the same run (a run that completes does not fail)
    excludes: tuple[str, ...] = ()
    # it compares the run with its fault-free twin (same config and seed, same cluster, trained
    # first): the runner trains one when a scenario asks for such a check. "timed": it compares
    # the twin's timings, which hold only for a twin trained on the machine as it is now (a twin
    # kept from a run under other load steps at another pace), so the twin is trained afresh
    twin: bool | Literal["timed"] = False
    # why it can never pass in this scenario, as (field, what and the fix), or None: given its
    # parameters, the scenario and the World (the trainer's steps, where the adapter knows them)
    cannot: Callable[[Any, Any, World], tuple[str, str] | None] | None = None

    def cannot_pass(self, params, scenario, world: World) -> tuple[str, str] | None:
        return self.cannot(params, scenario, world) if self.cannot else None

    def params(self, value: Any) -> Strict:
        """The parameters of an ``expect`` entry, long form or shorthand; ValueError says which
        field is wrong and how to write it."""
        if value is None:
            value = {}
        elif not isinstance(value, dict):
            if self.scalar is None:
                raise ValueError(f"{self.name}: write the mapping form ({self.name}: {{...}}), "
                                 f"not {value!r}")
            try:
                value = self.scalar(self.name, value)
            except ValueError as e:
                raise ValueError(f"{self.name}: {e}") from None
        try:
            return self.Params.model_validate(value)
        except ValidationError as e:
            raise ValueError(first_error(e, self.name)) from None
        except Exception as e:  # noqa: BLE001 - a plugin's validator with a bug: named
            raise ValueError(f"{self.name}: the check's own validator failed ({type(e).__name__}: "
                             f"{e}); that is a bug of the package that provides "
                             f"{self.name!r}") from None


    def __call__(self, o: Outcome, params) -> Verdict:
        return self.judge(o, params)


# name -> Check, from the entry point group rlsim.checks (rlsim's own and any package's)
CHECKS: Registry = Registry("rlsim.checks", "check", lambda c: c.name,
                            accepts=lambda c: isinstance(c, Check),
                            kind="Check (made with @rlsim.checks.check)")


def check(Params: type[Strict], scalar: Callable[[str, Any], dict] | None = None,
          needs: tuple[str, ...] = (), figure: str | None = None,
          excludes: tuple[str, ...] = (), twin: bool | Literal["timed"] = False,
          cannot: Callable[[Any, Any, World], tuple[str, str] | None] | None = None):
    """Make the decorated judge a :class:`Check` of its name (register it with an entry point in
    the group ``rlsim.checks``; rlsim's own are in its pyproject.toml). ``cannot``: why it can
    never pass in a scenario (refused when the scenario is read)."""
    def make(judge: Callable[[Outcome, Any], Verdict]) -> Check:
        return Check(judge.__name__, Params, judge, scalar, needs, figure, excludes, twin,
                     cannot)
    return make


class _Figures(Mapping):
    """Check name -> column head of the checks whose value is a figure people compare across
    runs and clusters (from :data:`CHECKS`, on first use); the report, the sign-off page and
    JUnit properties carry them."""

    def _all(self) -> dict[str, str]:
        return {name: c.figure for name, c in CHECKS.items() if c.figure}

    def __getitem__(self, name: str) -> str:
        return self._all()[name]

    def __iter__(self):
        return iter(self._all())

    def __len__(self) -> int:
        return len(self._all())


FIGURES = _Figures()


def _needs_a_fault(what: str, disruptive: bool = False):
    """A ``cannot`` for a check that judges a fault's effect: refused with none to judge."""
    def cannot(params, scenario, world: World) -> tuple[str, str] | None:
        has = scenario.disrupts if disruptive else bool(scenario.faults)
        if not has:
            kind = "disruptive fault (one that kills, cuts or stalls)" if disruptive else "fault"
            return "", f"the scenario has no {kind}: {what}; add one, or drop the check"
        return None
    return cannot


# -- shorthands: each reads (check name, scalar) into the long form's mapping ----------------------
def _true(name: str, value: Any) -> dict:
    if value is not True:
        raise ValueError(f"write `{name}: true` (or `{name}: {{}}`), not {value!r}")
    return {}


def _count(*fields: str) -> Callable[[str, Any], dict]:
    """A whole number that fills ``fields`` (``restarts: 1`` is exactly one)."""
    def read(name: str, value: Any) -> dict:
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"write a whole number (`{name}: 1`) or the mapping form, not "
                             f"{value!r}")
        return dict.fromkeys(fields, value)
    return read


def _seconds(name: str, value: Any) -> dict:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"write a number of seconds (`{name}: 30`) or the mapping form, not "
                         f"{value!r}")
    return {"seconds": value}


def _ratio(field_name: str) -> Callable[[str, Any], dict]:
    """A number that fills ``field_name`` (``throughput_within: 0.8`` is its ratio)."""
    def read(name: str, value: Any) -> dict:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"write a ratio (`{name}: 0.8`) or the mapping form, not {value!r}")
        return {field_name: value}
    return read


def _text(field_name: str) -> Callable[[str, Any], dict]:
    def read(name: str, value: Any) -> dict:
        if not isinstance(value, str):
            raise ValueError(f"write a string (`{name}: ...` is its {field_name}) or the mapping "
                             f"form, not {value!r}")
        return {field_name: value}
    return read


# -- what more than one family reads of a history --------------------------------------------------
def _line(e: dict, t0: float) -> str:
    extra = {k: v for k, v in e.items() if k not in ("ts", "source", "type", "metrics")}
    reward = (e.get("metrics") or {}).get("rollout/reward_mean") \
        if isinstance(e.get("metrics"), dict) else None
    if is_number(reward):
        extra["reward"] = round(reward, 3)
    return f"+{e['ts'] - t0:7.2f}s {e['source']:7} {e['type']:18} {json.dumps(extra)[:160]}"


def _interesting(o: Outcome) -> list[str]:
    """The timeline without its step_end lines, except the last (how far training got)."""
    last = o.trainer("step_end")[-1:]
    keep = [e for e in o.timeline if e["type"] != "step_end" or any(e is x for x in last)]
    return [_line(e, o.started) for e in keep][-25:]


def _first_fault(o: Outcome) -> dict | None:
    hits = [e for e in o.rlsim("fault_injected") if e.get("disruptive")]
    return hits[0] if hits else None


def _restarts(o: Outcome) -> list[dict]:
    """In-process restarts (the trainer's ``restart``) and relaunches by the runner, in order."""
    return sorted(o.trainer("restart") + o.rlsim("relaunch"), key=lambda e: e["ts"])


def stalled_said(e: dict) -> str:
    """A ``trainer_stalled`` event (the progress watchdog ended the run) in words: after which
    fault, how long silent, what of the trainer Ray held on dead nodes, its last line."""
    bound = e.get("bound_s")
    end = "the launch was killed and relaunched (relaunch.on_stall)" if e.get("relaunched") \
        else "the run was ended"
    words = [f"the trainer stalled after {e.get('fault', 'a fault')}: no progress for "
             f"{e.get('seconds', '?')} s (trainer.progress_watchdog_s: {bound}), so {end}"]
    if e.get("unread"):
        words.append(f"what it waits on could not be read ({e['unread']})")
    if e.get("died"):
        words.append(f"its actors that died since: {e['died']}")
    if e.get("alive"):
        words.append(f"alive and waiting: {e['alive']}")
    if e.get("on_dead_nodes"):
        words.append(f"Ray still held of it on dead nodes: {e['on_dead_nodes']}")
    if e.get("unplaced"):
        words.append(f"waiting for a place: {e['unplaced']}")
    if isinstance(e.get("down"), dict) and e["down"] and not e.get("on_dead_nodes"):
        words.append(f"nodes down: {', '.join(f'{n} ({why})' for n, why in e['down'].items())}")
    last = [line for line in e.get("last_lines") or [] if isinstance(line, str)]
    if last:
        words.append(f"its last line: {' '.join(last[-1].split())[:200]}")
    return "; ".join(words)


def _twin(o: Outcome) -> str:
    """How a verdict names the twin it compared against: its key and when it was made."""
    about = o.baseline_about
    if not about:
        return ""
    made = about.get("made")
    try:  # a record's time is read back: 1e300 or NaN there is no date, and no traceback
        made = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(made)) \
            if is_number(made) else "?"  # (localtime(None) is now)
    except (ValueError, OverflowError, OSError):
        made = "?"
    how = "kept from an earlier run" if about.get("cached") else "trained for this run"
    if isinstance(damaged := about.get("replaced_damaged"), str):
        how += f", replacing a damaged record ({damaged})"
    return f" (twin {shown(str(about.get('key', '?')))[:40]}, {how}, made {made})"
