"""What a scenario file says, as pydantic models: cluster, trainer, faults on a schedule, checks.

A scenario reads top to bottom as a story::

    name: node_failure_mid_run
    tags: [node_failure]
    cluster: {nodes: 3, gpus_per_node: 2}
    trainer: {config: grpo_tiny, overrides: {save_freq: 5}}
    faults:
      - at: {step: 7}
        kill_node: {node: 1}
    expect:
      - completes: {}
      - restarts: {min: 1}
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from rlsim.adapters import ADAPTERS
from rlsim.adapters.base import placeholder_problem
from rlsim.backends import DEFAULT, BackendName
from rlsim.checks import CHECKS
from rlsim.events import EVENT_TYPES
from rlsim.faults import FAULTS
from rlsim.fields import DAY, ROLE_NAME, Refers, Strict, World, first_error, problem, regex
from rlsim.history import HARNESS_EVENTS, RAY_EVENTS
from rlsim.host.spec import ClusterShape, HealthChecks, per_node_problem
from rlsim.reach import substrate_problem
from rlsim.scenario.watchdog import DEFAULT_S as WATCHDOG_S

OVERRIDE_KEY = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$")
ENV_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# a mark's name: an event type, as the timeline and `at: {event: NAME}` write it
MARK_NAME = re.compile(r"^[a-z][a-z0-9_]{0,62}$", re.ASCII)
SUBSTRATE_HINT = r"^[A-Za-z0-9.\-]+:[0-9]{1,5}$"  # HOST:PORT, for an editor
MIN_RUN_S = 10.0  # a cluster, a trainer and its first step: no run is shorter here
TAG = re.compile(r"^[A-Za-z_]\w{0,63}$", re.ASCII)
# pytest's own marks, and what each would do to a scenario that carried it as a tag
PYTEST_MARKS = {"skip": "skip the scenario", "skipif": "break its collection",
                "xfail": "turn its failure into a pass", "parametrize": "break its collection",
                "usefixtures": "break its collection", "filterwarnings": "break its collection",
                "tryfirst": "reorder hooks", "trylast": "reorder hooks"}
MODULE_NAME = re.compile(r"^[A-Za-z_]\w*(\.[A-Za-z_]\w*)*$", re.ASCII)
# what the runner sets for every launch of a trainer, and why
RUNNER_ENV = {"RAY_ADDRESS": "the cluster's own GCS address", "RLSIM_RUN_DIR": "the run directory",
              "RLSIM_ATTEMPT": "the launch's number", "RAY_AUTH_MODE": "the cluster's token auth",
              "RAY_AUTH_TOKEN_PATH": "the cluster's token"}
# The tag of the slow tier: scenarios minutes long on a 2-core machine (full-scale ranks) that the
# test command leaves out. pytest runs them with --rlsim-slow; `rlsim run` runs one named by its
# file, and those in a folder with --slow.
SLOW = "slow"


class ClusterSection(ClusterShape):
    """The scenario's cluster: its shape (:class:`rlsim.host.spec.ClusterShape`, defaults and limits
    shared with the CLI and the fixture) and how the scenario runs on it."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)
    backend: BackendName = DEFAULT
    # the pattern is an editor's hint: _substrate_address checks the address, saying in words
    # what is wrong
    on: Annotated[str, Field(json_schema_extra={"pattern": SUBSTRATE_HINT})] | None = Field(
        None,
        description="a substrate's GCS address, HOST:PORT: the nodes spread over the machines "
                    "of that plain Ray cluster of CPU machines, node i on machine i, as with "
                    "`rlsim cluster --on` (docs/howto/substrate.md); unset: one machine")
    checkpoint_storage: Literal["shared", "node_local"] = Field(
        "shared",
        description="shared: every node sees the trainer's checkpoint directory (NFS, a shared "
                    "volume); node_local: each node has its own disk there (docker)")
    skip_on: dict[BackendName, str] = Field(
        default_factory=dict,
        description="backend -> why this scenario's story does not hold there (it is skipped "
                    "with that reason)")
    health: HealthChecks = Field(
        default_factory=HealthChecks,
        description="the GCS's health checks of every node (default: a dead node declared dead "
                    "in about a second). A large cluster on few cores needs Ray's own "
                    "(initial_delay_ms 5000, period_ms 3000, timeout_ms 10000, "
                    "failure_threshold 5): 64 nodes and 64 ranks starting on 2 cores missed "
                    "the default's heartbeats, and Ray declared live nodes dead")

    @model_validator(mode="after")
    def _versions_on_nodes(self) -> ClusterSection:
        # the interpreter's form only: the host that runs the scenario must have it, or skips it
        problem = per_node_problem(self.nodes, self.ray_version, self.python, on_this_host=False)
        if problem:
            raise ValueError(problem)
        return self

    @field_validator("on")
    @classmethod
    def _substrate_address(cls, on: str | None) -> str | None:
        if on is not None and (found := substrate_problem(on)):
            raise ValueError(f"{found}; fix: give the substrate's GCS address as HOST:PORT, "
                             "e.g. on: 10.0.0.1:6379")
        return on

    @model_validator(mode="after")
    def _one_way_to_run(self) -> ClusterSection:
        # a substrate's nodes are processes on its machines: the runner would drop the backend
        if self.on is not None and self.backend != DEFAULT:
            raise ValueError(f"backend: {self.backend} with on: {self.on}: a cluster on a "
                             "substrate runs its nodes as processes on the substrate's "
                             f"machines, never as {self.backend} nodes; fix: drop backend (or "
                             "drop on to run here)")
        return self


class Relaunch(Strict):
    max: int = Field(ge=1, le=100, description="relaunches after the first launch")
    on_stall: bool = Field(False, description="also relaunch a launch the progress watchdog "
                           "ended (trainer.progress_watchdog_s), as a job supervisor kills a "
                           "hung job and queues it again; without it a stall ends the run")


class TrainerSection(Strict):
    """The trainer and how to drive it: the reference trainer by its config (``adapter: rlsim``,
    the default), or any command through an adapter (:mod:`rlsim.adapters`)."""

    adapter: str = Field("rlsim", description="how the trainer is driven: "
                         "rlsim (the reference trainer), events (a command writing rlsim's "
                         "events.jsonl), plain (any command writing no rlsim events: a Ray "
                         "script, Ray Data, Tune; judged by its exit code), ray_train (a Ray "
                         "Train job, unmodified), verl, openrlhf, nemo_rl (read from their "
                         "output and checkpoints)")
    config: str | None = Field(None, description="the reference trainer's config: a preset "
                               "(grpo_tiny, ppo_tiny) or a YAML file, relative to the scenario's "
                               "folder (adapter rlsim)")
    overrides: dict[str, Any] = Field(default_factory=dict, description="dotted key -> value "
                                      "(adapter rlsim); {attempt} in a string value is the "
                                      "launch's number (0, then n for the n-th relaunch)")
    command: list[str] | None = Field(None, min_length=1, description="argv, run in the "
                                      "scenario's folder (or cwd), so relative paths mean what "
                                      "they mean in a shell there; placeholders {python}, "
                                      "{run_dir}, {attempt}, {ray_address} (other adapters)")
    prepare: list[str] | None = Field(None, min_length=1, description="argv run once before "
                                      "the first launch, where the command runs and with its "
                                      "placeholders ({attempt} is 0): what the trainer reads "
                                      "made first (a dataset, a model), so that the command stays "
                                      "the framework's own; a non-zero exit ends the run "
                                      "before any launch")
    requires: dict[str, str] = Field(default_factory=dict, description="Python module -> how "
                                     "to install it: what the trainer needs in rlsim's Python "
                                     "beyond rlsim's own set-up (a framework); without one the "
                                     "scenario is skipped, saying how")
    cwd: str | None = Field(None, description="where the command runs, relative to the "
                            "scenario's folder (default: the folder itself)")
    env: dict[str, str] = Field(default_factory=dict, description="extra environment")
    total_steps: int | None = Field(None, ge=1, description="the steps the command runs (other "
                                    "adapters; the reference trainer's config says its own)")
    relaunch: Relaunch | None = Field(None, description="relaunch a command that exited non-zero, "
                                      "as a scheduler would")
    timeout_s: float = Field(300, ge=MIN_RUN_S, le=7 * DAY, description="the whole run, faults and "
                             "relaunches included")
    progress_watchdog_s: float | None = Field(
        WATCHDOG_S, ge=5, le=DAY, description="after a disruptive fault, the longest the trainer "
        "may show no progress (no event; for a plain program, no output) before the run is "
        "ended as stalled, naming what it waits on; the clock starts at the fault or the "
        "launch's last event, once the launch has logged one. null: no watchdog (then only "
        "timeout_s ends a hang)")
    marks: dict[str, str] = Field(
        default_factory=dict, description="event name -> pattern searched in each line of the "
        "program's output (adapter plain): the first matching line of a launch is an event of "
        "that name, which a fault can wait for (at: {event: NAME}) instead of a time")
    roles: dict[Annotated[str, Field(pattern=f"^{ROLE_NAME}$")], str] = Field(
        default_factory=dict, description="role -> pattern searched in Ray actor class names: "
        "how a fault aimed at a role's rank (kill_role, or kill_node: {role: ..., rank: ...}) "
        "finds it in a trainer that logs no worker table; ranks follow the actors' nodes by "
        "address, then their pids")

    @property
    def workdir(self) -> Path:
        """The folder the trainer runs in: ``cwd`` once the scenario's reader made it absolute
        (:func:`rlsim.scenario.loader.load`), else this process's."""
        return Path(self.cwd) if self.cwd and Path(self.cwd).is_absolute() else \
            Path.cwd() / (self.cwd or "")

    @field_validator("roles")
    @classmethod
    def _patterns_compile(cls, roles: dict[str, str]) -> dict[str, str]:
        for role, pattern in roles.items():
            try:
                regex(pattern)
            except ValueError as e:
                raise ValueError(f"roles.{role}: {e}") from None
        return roles

    @field_validator("marks")
    @classmethod
    def _marks_ok(cls, marks: dict[str, str]) -> dict[str, str]:
        for name, pattern in marks.items():
            if not MARK_NAME.match(name):
                raise ValueError(f"{name[:80]!r} is not an event name: lower-case letters, "
                                 "digits and _, starting with a letter (e.g. tasks_running)")
            if name in EVENT_TYPES or name in HARNESS_EVENTS:
                raise ValueError(f"{name!r} is an event rlsim already knows; a mark of that "
                                 "name would pass for it: name it otherwise")
            try:
                regex(pattern)
            except ValueError as e:
                raise ValueError(f"{name}: {e}") from None
        return marks

    @field_validator("requires")
    @classmethod
    def _module_names(cls, requires: dict[str, str]) -> dict[str, str]:
        for module in requires:
            if not MODULE_NAME.match(module):
                raise ValueError(f"requires: {module!r} is not a Python module name (dotted "
                                 "names such as verl or vllm.engine)")
        return requires

    @field_validator("env")
    @classmethod
    def _not_ours(cls, env: dict[str, str]) -> dict[str, str]:
        for key in env:
            if key in RUNNER_ENV:
                raise ValueError(f"env.{key}: rlsim sets {key} for every launch ({RUNNER_ENV[key]}"
                                 "); a value here would silently replace it: drop it")
            if not ENV_KEY.match(key):
                raise ValueError(f"env: {key!r} is not an environment variable name (letters, "
                                 "digits and _, not starting with a digit)")
        return env

    @field_validator("overrides")
    @classmethod
    def _keys_ok(cls, overrides: dict[str, Any]) -> dict[str, Any]:
        for key in overrides:
            if not OVERRIDE_KEY.match(key):
                raise ValueError(f"override key {key!r} is not a trainer config key: write a "
                                 "dotted name such as total_steps or actor.lr")
            if key == "run_dir" or key.startswith("run_dir."):
                raise ValueError("overrides.run_dir: rlsim gives each run its folder and reads "
                                 "the trainer's events there; elsewhere they would never be "
                                 "read: drop it")
        return overrides

    @model_validator(mode="after")
    def _driven_one_way(self) -> TrainerSection:
        if self.adapter not in ADAPTERS:
            raise ValueError(f"adapter: unknown adapter {self.adapter!r}; known: "
                             f"{', '.join(ADAPTERS)}")
        if self.marks and not ADAPTERS[self.adapter].reads_marks:
            raise ValueError(f"marks: adapter {self.adapter} does not read marks from the "
                             "output (adapter plain does); drop them, or wait on an event the "
                             "adapter logs")
        if self.adapter == "rlsim":
            if self.config is None:
                raise ValueError("config: required for the reference trainer (adapter rlsim): "
                                 "a preset (grpo_tiny, ppo_tiny) or a YAML file of your own; or "
                                 "set adapter and command")
            if self.command is not None or self.total_steps is not None or self.prepare:
                raise ValueError("command: the reference trainer is started from its config; "
                                 "drop command/prepare/total_steps, or name another adapter")
            if self.roles:
                raise ValueError("roles: the reference trainer logs where each rank runs; roles "
                                 "are for trainers that do not (other adapters)")
            return self
        if self.config is not None or self.overrides:
            raise ValueError(f"config: adapter {self.adapter} runs a command; config and "
                             "overrides are the reference trainer's (adapter rlsim)")
        if self.command is None:
            raise ValueError(f"command: required for adapter {self.adapter}: the argv that "
                             "starts the trainer, e.g. [\"{python}\", \"train.py\", \"{run_dir}\"]")
        for field, argv in (("command", self.command), ("prepare", self.prepare or ["-"])):
            for arg in argv:
                if problem := placeholder_problem(arg):
                    raise ValueError(f"{field}: {problem}")
            if argv[0] == "{python}" and len(argv) == 1:
                raise ValueError(f"{field}: [\"{{python}}\"] alone starts an interpreter that "
                                 "waits on its input until the run times out; give the script: "
                                 "[\"{python}\", \"train.py\", ...] (or -m module)")
        return self


class At(Strict):
    """When a fault fires: at a trainer step, seconds after the trainer started, or an event."""

    step: Annotated[int, Field(ge=1, le=10**9), Refers("step")] | None = None
    seconds: float | None = Field(None, ge=0, le=DAY)
    event: str | None = None

    @model_validator(mode="after")
    def _one_trigger(self) -> At:
        if self.seconds is not None and (self.step is not None or self.event is not None):
            raise ValueError("give `seconds`, or `step`, or `event` (with an optional `step`)")
        if self.seconds is None and self.step is None and self.event is None:
            raise ValueError("say when: {step: N}, {seconds: S} or {event: NAME}")
        return self


class FaultEntry(BaseModel):
    """``{at: {...}, <fault>: {...}, for_s: S}``: one fault, when, and for how long."""

    model_config = ConfigDict(extra="allow", allow_inf_nan=False, strict=True)
    _params: Strict = PrivateAttr()
    at: At
    for_s: float | None = Field(None, gt=0, le=DAY,
                                description="heal after S seconds (else at the end)")
    heal_at: At | None = Field(None, description="heal when this happens (the shape of at: a "
                               "step, an event, seconds after the trainer started); a story that "
                               "needs X before Y says so with events, never with seconds")
    may_miss: bool = Field(False, description="the story means this fault to reach nothing of "
                           "the trainer (a node it does not use): its miss passes, marked in "
                           "the report; otherwise a fault that reached none of the trainer's "
                           "actors, connections or files fails the scenario")

    @model_validator(mode="after")
    def _one_fault(self) -> FaultEntry:
        names = list(self.model_extra or {})
        unknown = [n for n in names if n not in FAULTS]
        if unknown:
            raise ValueError(f"unknown fault {unknown[0]!r}; known: {', '.join(FAULTS)}")
        if len(names) != 1:
            raise ValueError(f"one fault per entry, found {names or 'none'}")
        if self.for_s is not None and self.heal_at is not None:
            raise ValueError("heal_at: give for_s or heal_at, not both")
        if (heal := self.heal_at) is not None:
            for unit, fire, end in (("step", self.at.step, heal.step),
                                    ("seconds", self.at.seconds, heal.seconds)):
                if fire is not None and end is not None and end <= fire:
                    raise ValueError(f"heal_at.{unit}: {end:g} is not after at.{unit} {fire:g}: "
                                     "a fault is healed after it fires; heal it later")
        try:  # validated once, kept as the fault's parameters
            self._params = FAULTS[names[0]].Params.model_validate(
                self.model_extra[names[0]] or {})
        except ValidationError as e:
            raise ValueError(first_error(e, names[0])) from None
        except Exception as e:  # noqa: BLE001 - a plugin's validator with a bug: named
            raise ValueError(f"{names[0]}: the fault's own validator failed "
                             f"({type(e).__name__}: {e}); that is a bug of the package that "
                             f"provides {names[0]!r}") from None
        return self

    @property
    def kind(self) -> str:
        return next(iter(self.model_extra))

    @property
    def params(self) -> Strict:
        return self._params


class Scenario(Strict):
    name: str = Field(pattern=r"^[a-z0-9][a-z0-9_]{0,62}$")
    tags: list[str] = Field(default_factory=list, description="words to select scenarios by "
                            "(pytest -m / -k); slow: the slow tier")
    description: str = ""
    seed: int = 0
    cluster: ClusterSection = Field(default_factory=ClusterSection)
    trainer: TrainerSection
    faults: list[FaultEntry] = Field(default_factory=list)
    expect: list[dict[str, Any]] = Field(min_length=1)
    _parsed: list[tuple[str, Strict]] | None = PrivateAttr(None)
    _runnable: dict[str, object] = PrivateAttr(default_factory=dict)  # backend -> class or refusal

    @field_validator("tags")
    @classmethod
    def _tags_ok(cls, tags: list[str]) -> list[str]:
        for tag in tags:
            if not TAG.match(tag):
                raise ValueError(f"tags: {tag!r} is not a tag: a word of letters, digits and _ "
                                 "(pytest selects by it: -m TAG)")
            if tag in PYTEST_MARKS:
                raise ValueError(f"tags: {tag!r} is one of pytest's own marks: as a tag it would "
                                 f"{PYTEST_MARKS[tag]}; name it otherwise")
        return tags

    @field_validator("expect")
    @classmethod
    def _checks(cls, expect: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for i, entry in enumerate(expect):
            if len(entry) != 1:
                raise ValueError(f"expect[{i}]: one check per entry, found {list(entry)}")
            (name, params), = entry.items()
            if name not in CHECKS:
                raise ValueError(f"expect[{i}]: unknown check {name!r}; known: {', '.join(CHECKS)}")
            try:
                CHECKS[name].params(params)
            except ValueError as e:
                raise ValueError(f"expect[{i}].{e}") from None
        return expect

    @model_validator(mode="after")
    def _observable(self) -> Scenario:
        """Every check's facts, and every event a fault waits for or a check counts, are ones the
        adapter (or the runner, from Ray) can see: never a silent pass."""
        adapter = ADAPTERS[self.trainer.adapter]
        seen = adapter.observes | HARNESS_EVENTS | set(self.trainer.marks)
        for i, (name, _) in enumerate(self.checks()):
            if missing := sorted(set(CHECKS[name].needs) - seen):
                raise ValueError(f"expect[{i}]: check {name} needs {', '.join(missing)}, which "
                                 f"adapter {adapter.name} cannot observe; {adapter.unseen_fix}")
        for where, event in self.named_events():
            if event not in seen:
                fix = f"use one of {', '.join(sorted(seen))}"
                if event == "step_end" and where.endswith(".step"):
                    fix = f"wait on an event or seconds instead ({fix})"
                raise ValueError(f"{where}: the trainer never logs an event {event!r} (adapter "
                                 f"{adapter.name}); {fix}")
        return self

    @model_validator(mode="after")
    def _fit_the_trainer(self) -> Scenario:
        """Each fault's parameters against the trainer and what its adapter can see
        (:meth:`Fault.trainer_problem`)."""
        adapter = ADAPTERS[self.trainer.adapter]
        for i, fault in enumerate(self.faults):
            if problem := FAULTS[fault.kind].trainer_problem(fault.params, self.trainer, adapter):
                raise ValueError(f"faults[{i}].{fault.kind}.{problem[0]}: {problem[1]}")
        return self

    @model_validator(mode="after")
    def _no_contradictions(self) -> Scenario:
        """Checks that cannot hold together, and faults that cannot both happen."""
        names = [name for name, _ in self.checks()]
        for i, name in enumerate(names):
            if clash := next((n for n in CHECKS[name].excludes if n in names), None):
                raise ValueError(f"expect[{i}].{name}: cannot hold in the same run as "
                                 f"expect[{names.index(clash)}].{clash}; keep the one the story "
                                 "expects")
        held: dict[tuple, int] = {}  # (node, when) -> the fault that takes it out of service
        lost: dict[tuple, int] = {}  # (node, gpu) -> the gpu_lost fault that takes it
        for i, fault in enumerate(self.faults):
            if fault.kind == "gpu_lost" and fault.params.node is not None:
                gpu = (fault.params.node, fault.params.gpu)
                if gpu in lost:
                    raise ValueError(f"faults[{i}].gpu_lost.gpu: GPU {gpu[1]} of node {gpu[0]} "
                                     f"is already lost (faults[{lost[gpu]}]); a GPU is lost "
                                     "once: name another")
                lost[gpu] = i
            node = getattr(fault.params, "node", None)
            if not FAULTS[fault.kind].holds_node or node is None or node == "random":
                continue
            when = (node, fault.at.step, fault.at.seconds, fault.at.event)
            if when in held:
                raise ValueError(f"faults[{i}].{fault.kind}.node: node {node} is already out of "
                                 f"service at that moment (faults[{held[when]}]); fire the "
                                 "second one later, or drop it")
            held[when] = i
        return self

    @model_validator(mode="after")
    def _fit_the_cluster(self) -> Scenario:
        """Each fault's and check's parameters against this cluster (:meth:`Fault.cluster_problem`,
        the references of :mod:`rlsim.fields`)."""
        for where, found in self.problems(World(self.cluster.nodes)):
            raise ValueError(f"{where}: {found}")
        return self

    def problems(self, world: World) -> list[tuple[str, str]]:
        """(field, what is wrong and the fix) for every fault and check parameter that names
        something ``world`` does not have."""
        out = []
        for i, fault in enumerate(self.faults):
            if found := FAULTS[fault.kind].cluster_problem(fault.params, self.cluster) or \
                    problem(fault.params, world):
                out.append((f"faults[{i}].{fault.kind}.{found[0]}", found[1]))
            if found := problem(fault.at, world):
                out.append((f"faults[{i}].at.{found[0]}", found[1]))
        for i, (name, params) in enumerate(self.checks()):
            if found := problem(params, world) or CHECKS[name].cannot_pass(params, self, world):
                out.append((f"expect[{i}].{name}" + (f".{found[0]}" if found[0] else ""),
                            found[1]))
        return out

    @property
    def slow(self) -> bool:
        return SLOW in self.tags

    @property
    def forwards_logs(self) -> bool:
        """Whether the cluster's worker nodes forward their actors' prints to the driver, as on a
        real cluster: a trainer of the user's own is read from its output (some adapters read
        those prints); the reference trainer logs its events itself and needs none."""
        return self.trainer.adapter != "rlsim"

    @property
    def disrupts(self) -> bool:
        """Whether a fault of this scenario disrupts the trainer (kills, cuts, stalls), rather
        than waiting for it to meet the fault (a damaged checkpoint, slow storage)."""
        return any(FAULTS[f.kind].disruptive for f in self.faults)

    @property
    def may_down_node(self) -> bool:
        """Whether a fault of this scenario can leave a node down once healed."""
        return any(FAULTS[f.kind].may_down_node for f in self.faults)

    @property
    def watches_ray(self) -> bool:
        """Whether the runner records Ray's own view (rlsim.scenario.watch): always for a trainer
        of the user's own; for the reference trainer, which reports its losses itself, only when
        the scenario names those events (the watch is one more process and GCS client: with it,
        head_restart_gcs_ft failed 2 of 4 runs here, without it 0 of 3)."""
        named = {event for _, event in self.named_events()}
        return self.trainer.adapter != "rlsim" or bool(named & RAY_EVENTS)

    def named_events(self) -> list[tuple[str, str]]:
        """(field, event type) for every event a fault waits for or an ``event`` check counts."""
        named = [(f"faults[{i}].{key}.event", at.event) if at.event is not None else
                 (f"faults[{i}].{key}.step", "step_end")  # a step is a step_end seen
                 for i, f in enumerate(self.faults)
                 for key, at in (("at", f.at), ("heal_at", f.heal_at))
                 if at is not None and (at.event is not None or at.step is not None)]
        return named + [(f"expect[{i}].event.type", p.type)
                        for i, (name, p) in enumerate(self.checks()) if name == "event"]

    def checks(self) -> list[tuple[str, Strict]]:
        """The ``expect`` entries as (check name, validated parameters), read once."""
        if self._parsed is None:
            self._parsed = [(name, CHECKS[name].params(p))
                            for entry in self.expect for name, p in entry.items()]
        return self._parsed
