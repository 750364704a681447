"""How fast Ray's GCS gives up on a node: the health checks of every node of a simulated cluster
(``cluster.health`` in a scenario), with bounds a user can read.

Ray declares a node dead once ``failure_threshold`` health checks in a row fail, one every
``period_ms`` after ``initial_delay_ms``, each failing at the latest after ``timeout_ms``. rlsim
waits for that verdict (a node restarted before it registers beside its old self, see
:meth:`rlsim.backends.started.StartedCluster.wait_for_dead`), so the settings are a wait: each
field is a whole number within a range, and together they may ask rlsim to wait at most
:data:`DEAD_WITHIN_MAX_S`. A million failures, or an initial delay of days, read at face value
once held a restart that long.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator, model_validator

DEAD_WITHIN_MAX_S = 600.0  # ten minutes: Ray's own defaults take 96 s
MARGIN_CHECKS = 2  # checks of slack past the threshold: a check lands between periods
# field -> (least, most, what one unit is, rlsim's default); the most keeps each field a wait a
# person would choose (a minute for a delay, a hundred misses)
LIMITS = {
    "initial_delay_ms": (0, 60_000, " ms", 1000),
    "period_ms": (50, 60_000, " ms", 300),
    "timeout_ms": (50, 60_000, " ms", 1000),
    "failure_threshold": (1, 100, " failed checks", 3),
}
RAY_DEFAULTS = {"initial_delay_ms": 5000, "period_ms": 3000, "timeout_ms": 10000,
                "failure_threshold": 5}


def _field(name: str, description: str):
    least, most, _, default = LIMITS[name]
    return Field(default, ge=least, le=most, description=description)


class HealthChecks(BaseModel):
    """GCS health-check settings for every node. Tuned far below Ray's production defaults
    (5000 ms initial delay, 3000 ms period, 10000 ms timeout, 5 failures) so that a dead node is
    declared dead in about a second instead of tens of seconds. Each is a whole number in its
    range; together they declare a dead node dead within 600 s (DEAD_WITHIN_MAX_S)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    initial_delay_ms: int = _field("initial_delay_ms", "before a node's first check (0-60000)")
    period_ms: int = _field("period_ms", "between a node's checks (50-60000)")
    timeout_ms: int = _field("timeout_ms", "a check that takes longer fails (50-60000)")
    failure_threshold: int = _field("failure_threshold", "failed checks in a row that declare "
                                    "a node dead (1-100)")

    @field_validator(*LIMITS, mode="before")
    @classmethod
    def _whole_in_range(cls, value: object, info: ValidationInfo) -> object:
        problem = value_problem(info.field_name, value)
        if problem:
            raise ValueError(problem)
        return value

    @model_validator(mode="after")
    def _dead_within_bound(self) -> HealthChecks:
        took = self.dead_within_s()
        if took > DEAD_WITHIN_MAX_S:
            raise ValueError(
                f"a dead node would be declared dead only after up to {took:.0f} s "
                f"(initial_delay_ms {self.initial_delay_ms} + (period_ms {self.period_ms} + "
                f"timeout_ms {self.timeout_ms}) x (failure_threshold {self.failure_threshold} + "
                f"{MARGIN_CHECKS})), which rlsim waits for before a node restarts; at most "
                f"{DEAD_WITHIN_MAX_S:.0f} s. Fix: lower failure_threshold, period_ms or "
                f"timeout_ms (Ray's own defaults, {_ray_defaults()}, take "
                f"{HealthChecks(**RAY_DEFAULTS).dead_within_s():.0f} s)")
        return self

    def dead_within_s(self) -> float:
        """The longest Ray may take to declare a dead node dead under these settings, as rlsim
        waits for it: the initial delay, then ``failure_threshold`` checks (and
        :data:`MARGIN_CHECKS` more), each a period and a timeout at most."""
        checks = self.failure_threshold + MARGIN_CHECKS
        return (self.initial_delay_ms + (self.period_ms + self.timeout_ms) * checks) / 1000


def dead_wait_s(health: HealthChecks, ready_timeout_s: float) -> float:
    """How long rlsim waits for Ray to declare a killed node dead before it starts the node
    again: what ``health`` asks (:meth:`HealthChecks.dead_within_s`), capped at
    :data:`DEAD_WITHIN_MAX_S` whatever built it, or the node's ``ready_timeout_s`` where that
    is longer."""
    return max(ready_timeout_s, min(health.dead_within_s(), DEAD_WITHIN_MAX_S))


def value_problem(name: str, value: object) -> str | None:
    """Why ``value`` cannot be health field ``name``, with the fix, or None. A quoted number, a
    boolean or a float is refused, as every other whole-number field of a scenario refuses it."""
    least, most, unit, default = LIMITS[name]
    fix = f"fix: write a whole number from {least} to {most}, e.g. {name}: {default}"
    if isinstance(value, bool) or not isinstance(value, int):
        return f"{_shown(value)} {_kind(value)}; {fix}"
    if not least <= value <= most:
        shown = str(value) if value.bit_length() <= 64 else \
            f"a number of about {int(value.bit_length() * 0.30103)} digits"
        return f"{shown} is outside {least}-{most}{unit}; {fix}"
    return None


def _shown(value: object) -> str:
    if isinstance(value, str):
        text = repr(value[:41])
    elif isinstance(value, bool):
        text = str(value).lower()  # as YAML writes it
    elif isinstance(value, float) or value is None:
        text = repr(value)
    else:
        text = f"a {type(value).__name__}"
    return text if len(text) <= 42 else text[:40] + "..."


def _kind(value: object) -> str:
    if isinstance(value, bool):
        return "is true/false, not a whole number"
    if isinstance(value, str) and value.strip().isascii() and value.strip().isdigit():
        return "is quoted (text), not a whole number: drop the quotes"
    if isinstance(value, str):
        return "is text, not a whole number"
    return "is a float, not a whole number" if isinstance(value, float) else "is not a number"


def _ray_defaults() -> str:
    return ", ".join(f"{k} {v}" for k, v in RAY_DEFAULTS.items())
