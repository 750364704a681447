"""The base of every parameter model a scenario file fills in (a fault's, a check's, a section's):
strict pydantic (unknown keys, non-finite numbers, and values of another type such as ``yes`` for
a number refused), and the shared field types.

A field that names something of the cluster or the trainer says so in its type, with
:class:`Refers`: a node index, a step, a role, a rank of a role. The scenario's reader resolves
every such field against the scenario's own cluster and trainer (:func:`problem`, the one place
that does), so a new fault or check gets those checks by using these types, never by a check per
field name. What is known grows as the scenario is read: the cluster's shape when the file is
parsed (node indices), then the trainer's facts from its adapter (the steps it runs, the ranks of
each role). Facts nobody knows are not guessed: their checks are skipped, never failed.
"""

from __future__ import annotations

import re
import typing
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    WrapValidator,
    model_validator,
)


@dataclass(frozen=True)
class Refers:
    """What a field names: ``node`` (an index of the cluster), ``step`` (a step the trainer
    reaches), ``role`` (one the trainer runs), ``rank`` (of the role in the field ``of``)."""

    kind: Literal["node", "step", "role", "rank", "role_rank"]
    of: str | None = None


ROLES = ("actor", "rollout", "ref", "critic", "reward")  # the reference trainer's
ROLE_NAME = r"[a-z][a-z0-9_]{0,31}"
MAX_NODE = 4095
NodeIndex = Annotated[int, Field(ge=0, le=MAX_NODE), Refers("node")]
Step = Annotated[int, Field(ge=0, le=10**9), Refers("step")]
# A role the trainer runs: the reference trainer's (actor, rollout, ref, critic, reward), Ray
# Train's (worker: its workers, ranked by world rank), a framework adapter's, or a name of the
# scenario's trainer.roles
Role = Annotated[str, Field(pattern=f"^{ROLE_NAME}$"), Refers("role")]
Rank = Annotated[int, Field(ge=0, le=4096), Refers("rank", of="role")]
# In a group of nodes: every node hosting a role (``rollout``), or the one hosting a rank of it
# (``rollout:1``), resolved when the fault fires
RoleRank = Annotated[str, Field(pattern=f"^{ROLE_NAME}(:[0-9]{{1,4}})?$"), Refers("role_rank")]
DAY = 86400.0  # no fault, wait or run in a scenario lasts longer
_ROLE_AND_MORE = re.compile(f"^({ROLE_NAME}):(.*)$", re.DOTALL)


def _not_a_node(value, roles: bool) -> str:
    """Why ``value`` names no node, in words (pydantic's own, for a union of a number and a
    name, reads "constrained-int: Input should be a valid integer"), and what to write."""
    what = "a node index (1) or a role (actor, or actor:1 for its rank 1)" if roles else \
        "a node index (1) or random"
    if isinstance(value, int) and not isinstance(value, bool):
        return f"node {value} is not a node index (0-{MAX_NODE}); give {what}"
    if isinstance(value, str) and value.isascii() and value.isdigit():
        return f"{value!r} is quoted: write the node index as a number ({int(value)})"
    if roles and isinstance(value, str) and (m := _ROLE_AND_MORE.match(value)):
        return (f"{value[:100]!r}: role:rank needs a whole number (0-9999) after the colon, "
                f"e.g. {m.group(1)}:1")
    if roles and isinstance(value, str):
        return (f"{value[:100]!r} is neither a node index nor a role (a role is lowercase "
                "letters, digits and _, starting with a letter); give " + what)
    return f"{repr(value)[:100]} is not a node; give {what}"


def _readable(roles: bool):
    def validate(value, handler):
        try:
            return handler(value)
        except ValidationError:
            raise ValueError(_not_a_node(value, roles)) from None
    return WrapValidator(validate)


# A node a fault hits: by index, or random (a node other than the head, from the scenario's seed)
NodeRef = Annotated[NodeIndex | Literal["random"], _readable(roles=False)]
# An entry of a group of nodes: a node index, a role (every node hosting one of its ranks) or a
# role's rank (role:rank)
NodeOrRole = Annotated[NodeIndex | RoleRank, _readable(roles=True)]


def _inside_run(path: str) -> str:
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if path.startswith("/") or ".." in parts or not parts or "\0" in path:
        raise ValueError(f"{path!r}: name a directory inside the run directory, such as "
                         "checkpoints (the trainer's default checkpoint_dir)")
    return path


def _disjoint(groups: list[list[int | str]]) -> list[list[int | str]]:
    """Groups that can never share a node, as far as their text tells: no node named twice, and
    no role named whole in one group (every node hosting one of its ranks) while another names
    one of its ranks (``actor`` and ``actor:1``: the node of rank 1 hosts the role). Where roles
    and indices may meet (``1`` and ``actor``), only the placement tells: refused when the fault
    fires (:meth:`rlsim.faults.base.FaultContext.groups`)."""
    seen: dict[object, int] = {}  # node index, "role" or (role, rank) -> its group
    for g, group in enumerate(groups):
        if not group:
            raise ValueError("an empty group cuts nothing off: drop it")
        for entry in group:
            key = _group_key(entry)
            if key in seen:
                named = f"node {entry}" if isinstance(entry, int) else repr(entry)
                raise ValueError(f"{named} is named twice; a node is in one group at most")
            seen[key] = g
    for g, group in enumerate(groups):
        for entry in group:
            key = _group_key(entry)
            if isinstance(key, tuple) and (whole := seen.get(key[0], g)) != g:
                raise ValueError(
                    f"groups {min(g, whole) + 1} and {max(g, whole) + 1} share a node: {entry} "
                    f"is a rank of {key[0]}, which group {whole + 1} names whole (every node "
                    f"hosting a rank of it); name {key[0]}'s ranks one by one, or put {entry} "
                    f"in group {whole + 1}")
    return groups


def _group_key(entry: int | str) -> object:
    """What an entry of a group names: a node index, a whole role, or (role, rank)."""
    if isinstance(entry, int):
        return entry
    role, _, rank = entry.partition(":")
    return (role, int(rank)) if rank else role


# Disjoint groups of nodes (a partition's, a link's ends), by index or by role; nodes named in
# none form one more
NodeGroups = Annotated[list[list[NodeOrRole]], Field(min_length=1), AfterValidator(_disjoint)]


# A directory of the run, relative to its run directory (a storage fault's ``path``)
RunPath = Annotated[str, AfterValidator(_inside_run)]
PORT_NAMES = re.compile(r"^(gcs|dashboard|client|(workers|daemons):(\d{1,2}))$")


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)


class NodeTarget(Strict):
    """The node a fault hits: by index (``node``), or as the node hosting rank ``rank`` of
    ``role`` when the fault fires (what a story means by "the node of actor rank 1": Ray places
    ranks where it likes, and an index may hold none of them)."""

    node: NodeRef | None = Field(None, description="the node's index (0 is the head; random: "
                                 "a node other than the head, from the scenario's seed)")
    role: Role | None = Field(None, description="instead of node: the node that hosts a rank of "
                              "this role when the fault fires (actor, rollout, ref, critic, "
                              "reward; worker for Ray Train; or a name of trainer.roles)")
    rank: Rank = Field(0, description="with role: which of its ranks (0 first)")

    @model_validator(mode="after")
    def _one_target(self):
        if (self.node is None) == (self.role is None):
            raise ValueError("name the node (node: 1) or a role's rank (role: actor, rank: 1): "
                             "one of them")
        if self.role is None and "rank" in self.model_fields_set and \
                "role" not in self.model_fields_set:  # (a record of its own says role: null)
            raise ValueError("rank names a rank of a role: give role too (role: actor, rank: 1)")
        return self


class Bounds(Strict):
    """A count between ``min`` and ``max`` (None: no upper bound); a ``min`` above ``max`` is
    refused when both are written (``max: 0`` alone means never, whatever ``min``'s default)."""

    min: int = Field(0, ge=0, le=10**6)
    max: int | None = Field(None, ge=0, le=10**6)

    @model_validator(mode="after")
    def _ordered(self):
        if self.max is not None and self.min > self.max and "min" not in self.model_fields_set:
            self.min = self.max
        if self.max is not None and self.min > self.max:
            raise ValueError(f"min {self.min} is above max {self.max}: no count satisfies "
                             "both; swap them or drop one")
        return self


PATTERN_MAX = 500  # characters: a pattern of a scenario names an error, a role, an event
# How long one search of a scenario's pattern may take, and how long one may take at validation
# on a text built to make it backtrack (2,000 characters): seconds of the process's CPU, which is
# what the regex engine's timeout counts (on a loaded machine the wall clock runs on past it)
SEARCH_S = 2.0
PROBE_S = 0.05


class PatternTooSlow(ValueError):
    """A scenario's pattern did not finish searching one text within :data:`SEARCH_S`."""


def search(pattern: str, text: str) -> bool:
    """Whether ``pattern`` (checked by :func:`regex`) is found in ``text``, searched with a time
    limit by the ``regex`` engine (Python's ``re`` cannot be interrupted): PatternTooSlow names
    the pattern and the fix when it runs over."""
    import regex as engine

    try:
        return engine.search(pattern, text, timeout=SEARCH_S) is not None
    except TimeoutError:
        raise PatternTooSlow(f"the pattern {pattern!r} searched one text of {len(text)} "
                             f"characters for over {SEARCH_S:g} s of CPU: write it with fewer "
                             "repetitions (e.g. one '.*' between two words)") from None


def regex(pattern: str) -> str:
    """A field validator: ``pattern`` compiles as a regular expression (Python's syntax) that
    searches a long text quickly. Python's own engine backtracks without bound: ``(.+)+QQ``
    searched one event of 40 characters for over 20 s, ``.*.*.*QQ`` 1,000 characters for 43 s,
    and cannot be interrupted. So every pattern of a scenario is searched by the ``regex`` engine
    (:func:`search`), which cuts those short and takes a time limit, and one that is still slow
    on a text made to make it backtrack is refused here, with the fix."""
    import regex as engine

    if len(pattern) > PATTERN_MAX:
        raise ValueError(f"a pattern of {len(pattern)} characters, over {PATTERN_MAX}: match "
                         "a shorter, telling part of the text")
    try:
        engine.compile(pattern)
        re.compile(pattern)  # the syntax of Python's re, which the docs promise
    except (re.error, engine.error) as e:
        raise ValueError(f"not a valid regular expression ({e}); escape special characters "
                         "with a backslash") from None
    if slow := _slow_on(pattern):
        raise ValueError(f"searching a text of {len(slow)} characters ({slow[:8]!r}...) took "
                         f"over {PROBE_S * 1000:.0f} ms of CPU: repetitions one after another "
                         "(such as '.*.*.*') search a long text for minutes; keep one between "
                         "two words")
    return pattern


def _slow_on(pattern: str) -> str | None:
    """A text of 2,000 characters that ``pattern`` takes over :data:`PROBE_S` to search, or None:
    runs of one character (a letter, a space, a digit, each of the pattern's own letters) and of
    the pattern's letters in turn, on which nested or adjacent repetitions backtrack."""
    import regex as engine

    letters = "".join(dict.fromkeys(c for c in pattern if c.isalnum() or c in " _-:./"))
    texts = ["a" * 2000, " " * 2000, "1" * 2000, *(c * 2000 for c in letters[:16]),
             (letters * 2000)[:2000]]
    for text in dict.fromkeys(texts):
        try:
            engine.search(pattern, text, timeout=PROBE_S)
        except TimeoutError:
            return text
    return None


def first_error(e, within: str = "") -> str:
    """A pydantic ValidationError as ``field: what is wrong`` (its first problem); with
    ``within``, the field is written as ``within.field`` (or ``within: ...`` for a problem of the
    whole model, two of its fields together)."""
    err = e.errors()[0]
    field = ".".join(str(x) for x in err["loc"])
    msg = err["msg"].removeprefix("Value error, ")
    where = ".".join(p for p in (within, field) if p)
    return f"{where}: {msg}" if where else msg


@dataclass(frozen=True)
class World:
    """What a scenario's fields are resolved against. ``nodes``: the cluster's; ``total_steps``
    and ``ranks`` (role -> ranks): the trainer's, None where its adapter cannot say; ``steps_knob``:
    the setting that changes the steps."""

    nodes: int
    total_steps: int | None = None
    ranks: dict[str, int] | None = None
    steps_knob: str = "trainer.total_steps"


def problem(params: BaseModel, world: World) -> tuple[str, str] | None:
    """The first field of ``params`` that names something ``world`` does not have, as (field,
    what is wrong and the fix); None when every reference resolves."""
    for name, info in type(params).model_fields.items():
        for ref in refers(info.annotation) + [m for m in info.metadata if isinstance(m, Refers)]:
            value = getattr(params, name)
            for v in _leaves(value):
                if said := _resolve(ref, v, params, world):
                    return name, said
    return None


def named_roles(params: BaseModel) -> list[tuple[str, str]]:
    """(field, role) for every role ``params`` names: a target's ``role``, a group's ``rollout``
    or ``rollout:1``."""
    found = []
    for name, info in type(params).model_fields.items():
        kinds = {r.kind for r in refers(info.annotation) + [m for m in info.metadata
                                                            if isinstance(m, Refers)]}
        if kinds & {"role", "role_rank"}:
            found += [(name, v.partition(":")[0]) for v in _leaves(getattr(params, name))
                      if isinstance(v, str)]
    return found


def refers(annotation) -> list[Refers]:
    """The references a type carries anywhere inside it (a union, a list, Optional)."""
    found = []
    if typing.get_origin(annotation) is typing.Annotated:
        found += [m for m in annotation.__metadata__ if isinstance(m, Refers)]
    for arg in typing.get_args(annotation):
        if arg is not annotation:
            found += refers(arg)
    return list(dict.fromkeys(found))


def _leaves(value) -> list:
    if isinstance(value, list | tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [] if value is None else [value]


def _resolve(ref: Refers, v, params: BaseModel, world: World) -> str | None:
    last = world.nodes - 1
    if ref.kind == "node":
        if v == "random":
            return None if last >= 1 else ("random picks a node other than the head, and this "
                                           "cluster has only the head: name node 0 or add nodes")
        if isinstance(v, int) and not 0 <= v <= last:
            return f"node {v} is outside the cluster (nodes 0-{last})"
    elif ref.kind == "step" and world.total_steps is not None and isinstance(v, int):
        if v > world.total_steps:
            return (f"step {v} is never reached: the trainer stops at total_steps="
                    f"{world.total_steps}; name an earlier step or raise {world.steps_knob}")
    elif ref.kind == "role" and world.ranks is not None and v not in world.ranks:
        return (f"role {v!r} is not in this run: its roles are {', '.join(sorted(world.ranks))}"
                " (a GRPO run has no critic; a run without a reward model no reward role)")
    elif ref.kind == "role_rank" and world.ranks is not None and isinstance(v, str):
        role, _, rank = v.partition(":")
        if role not in world.ranks:
            return (f"role {role!r} is not in this run: its roles are "
                    f"{', '.join(sorted(world.ranks))}")
        if rank and int(rank) >= world.ranks[role]:
            return (f"rank {rank} of role {role!r} does not exist: the run has "
                    f"{world.ranks[role]} ({role} ranks 0-{world.ranks[role] - 1})")
    elif ref.kind == "rank" and world.ranks is not None:
        role = getattr(params, ref.of or "", None)
        have = world.ranks.get(role)
        if have is not None and isinstance(v, int) and v >= have:
            return (f"rank {v} of role {role!r} does not exist: the run has {have} "
                    f"({role} ranks 0-{have - 1})")
    return None
