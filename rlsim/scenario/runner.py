"""Run one scenario: cluster up, trainer started, faults fired on schedule, all healed, a timeline.

The schedule (``at``) is checked every 100 ms against the trainer's own ``events.jsonl`` (steps and
event types) and the clock. Every fault is healed at the end whatever happened (trainer crash, a
check's failure, Ctrl-C); the cluster is torn down; then leaks are looked for. The merged timeline
(trainer events and rlsim's fault and cluster events, by time) is what checks judge.
"""

from __future__ import annotations

import itertools
import json
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlsim.backends import STARTED, cluster_class
from rlsim.backends.base import ClusterStartError
from rlsim.backends.real import RealCluster, Unsupported, check_supported
from rlsim.faults import FAULTS, Fault, FaultContext
from rlsim.scenario.loader import REPO, resolve, trainer_overrides
from rlsim.scenario.pool import Pool, twin_key
from rlsim.scenario.schema import FaultEntry, Scenario
from rlsim.spec import ClusterSpec

_names = itertools.count()


@dataclass
class Outcome:
    """What happened: the merged timeline, the trainer's exit and output, leaks after teardown."""

    scenario: Scenario
    run_dir: Path
    timeline: list[dict[str, Any]] = field(default_factory=list)
    returncode: int | None = None
    output: str = ""
    started: float = 0.0
    leaks: list[str] = field(default_factory=list)
    baseline_dir: Path | None = None
    refusal: str | None = None  # why the cluster did not form, when it did not

    def trainer(self, type: str | None = None) -> list[dict]:
        return [e for e in self.timeline if e["source"] == "trainer"
                and (type is None or e["type"] == type)]

    def rlsim(self, type: str | None = None) -> list[dict]:
        return [e for e in self.timeline if e["source"] == "rlsim"
                and (type is None or e["type"] == type)]


class EventTail:
    """New lines of a growing ``events.jsonl``, read incrementally."""

    def __init__(self, path: Path) -> None:
        self.path, self.offset, self.events = path, 0, []

    def poll(self) -> list[dict]:
        try:
            with self.path.open() as f:
                f.seek(self.offset)
                chunk = f.read()
        except FileNotFoundError:
            return []
        complete = chunk[: chunk.rfind("\n") + 1]
        self.offset += len(complete.encode())
        new = [json.loads(line) for line in complete.splitlines() if line.strip()]
        self.events += new
        return new


def trainer_command(sc: Scenario, run_dir: Path) -> list[str]:
    # the same overrides `rlsim validate` checked against the trainer's config
    return [sys.executable, "-m", "trainer", "--config", str(resolve(sc.trainer.config)),
            f"run_dir={run_dir}", *trainer_overrides(sc)]


class Schedule:
    """Which faults are due now, given the trainer's events and the clock."""

    def __init__(self, entries: list[FaultEntry]) -> None:
        self.pending = list(enumerate(entries))

    def due(self, events: list[dict], elapsed: float) -> list[tuple[int, FaultEntry]]:
        fire = [(i, e) for i, e in self.pending if _reached(e, events, elapsed)]
        self.pending = [p for p in self.pending if p not in fire]
        return fire


def _reached(entry: FaultEntry, events: list[dict], elapsed: float) -> bool:
    at = entry.at
    if at.seconds is not None:
        return elapsed >= at.seconds
    wanted = at.event or "step_end"
    return any(e["type"] == wanted and (at.step is None or e.get("step", 0) >= at.step)
               for e in events)


def make_cluster(sc: Scenario, backend: str = "local", ray_address: str | None = None,
                 out_dir: Path | None = None):
    """The scenario's cluster on ``backend``, not started yet; its nodes see ``out_dir`` (the run
    directory's parent). Raises ``Unsupported`` when the backend cannot run the scenario (a skip,
    not a failure)."""
    if backend in sc.cluster.skip_on:
        raise Unsupported(sc.cluster.skip_on[backend])
    for key, what in (("ray_version", "a node with another Ray"),
                      ("python", "a node with another Python"),
                      ("checkpoint_storage", "a disk per node")):
        if getattr(sc.cluster, key) not in ({}, "shared") and backend != "docker":
            raise Unsupported(f"cluster.{key} ({what}) needs container nodes: run it with "
                              "--backend docker")
    if backend == "docker":
        from rlsim.backends.docker import engine_problem, interpreter_problem

        problem = engine_problem() or next(
            (p for path in sc.cluster.python.values() if (p := interpreter_problem(path))), None)
        if problem:
            raise Unsupported(f"--backend docker: {problem}", missing_part=True)
    # built after the checks above: a missing interpreter is a skip there, not a spec error
    spec = ClusterSpec(name=f"sc{os.getpid()}-{next(_names)}", nodes=sc.cluster.nodes,
                       gpus_per_node=sc.cluster.gpus_per_node,
                       gpu_memory_gb=sc.cluster.gpu_memory_gb,
                       ready_timeout_s=sc.cluster.ready_timeout_s,
                       # the trainer is a plain driver: no Jobs API needed, and without the
                       # dashboard a 3-node cluster is up 2.5-5 s sooner and 0.9 GB smaller
                       dashboard=False,
                       ray_version=sc.cluster.ray_version, python=sc.cluster.python,
                       mounts=[str(out_dir.resolve())] if out_dir else [],
                       node_local=[str(checkpoint_dir(out_dir))]
                       if out_dir and sc.cluster.checkpoint_storage == "node_local" else [])
    if backend == "real":
        address = ray_address or os.environ.get("RAY_ADDRESS")
        if not address:
            raise Unsupported("--backend real needs the cluster's address: --ray-address "
                              "HOST:PORT (or RAY_ADDRESS)")
        kinds = [f.kind for f in sc.faults]
        check_supported(kinds)
        return RealCluster(address, spec, gpu_faults="gpu_oom" in kinds)
    if backend not in STARTED:
        raise Unsupported(f"unknown backend {backend!r} ({', '.join(STARTED)}, real)")
    return cluster_class(backend)(spec)


def checkpoint_dir(out_dir: Path) -> Path:
    """The trainer's checkpoint directory in a scenario's output directory (its default)."""
    return out_dir.resolve() / "run" / "checkpoints"


def run_scenario(sc: Scenario, out_dir: Path, seed: int | None = None,
                 on_progress=None, backend: str = "local",
                 ray_address: str | None = None, pool: Pool | None = None) -> Outcome:
    """Run ``sc`` with its outputs under ``out_dir``; never raises for a trainer failure
    (``Unsupported`` when the backend cannot run it, before anything starts).

    With a ``pool``, a running cluster of the same shape left clean by an earlier scenario is
    used instead of starting one, and this one is kept for the next (see rlsim.scenario.pool);
    without, the cluster is started and stopped here.

    A previous run's outputs there move to ``<out_dir>.previous`` (one generation kept): the trainer
    would resume from its checkpoints and the schedule would read its events.
    """
    pool = pool or Pool(reuse=False)
    fresh = make_cluster(sc, backend, ray_address, out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        previous = out_dir.with_name(out_dir.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        out_dir.rename(previous)
    out_dir.mkdir(parents=True, exist_ok=True)
    cluster, reused = pool.take(fresh, backend)  # from here on the finally below gives it back
    outcome = Outcome(sc, out_dir / "run")
    log = _Recorder(outcome)
    rng = random.Random(sc.seed if seed is None else seed)
    log.emit("scenario_start", name=sc.name, seed=sc.seed if seed is None else seed)
    faults: list[Fault] = []
    try:
        if not reused:
            try:
                cluster.start()
            except (ClusterStartError, TimeoutError) as e:  # judged by `refused`, never a crash
                outcome.refusal = str(e)
                log.emit("cluster_refused", message=str(e)[:2000])
                return outcome
        log.emit("cluster_ready", nodes=[n.address for n in cluster.nodes()], reused=reused)
        _preflight(cluster, out_dir, log)
        if any(name == "matches_baseline" for name, _ in sc.checks()):
            outcome.baseline_dir = _baseline(sc, cluster, out_dir / "baseline", log, pool,
                                             backend)
        _drive(sc, cluster, outcome, rng, faults, log, on_progress)
    finally:
        for fault in reversed(faults):
            try:
                healed = fault.heal()
            except Exception as e:  # keep healing the others
                log.emit("fault_heal_error", fault=fault.name, message=str(e))
            else:
                if healed is not None:
                    log.emit("fault_healed", fault=fault.name, **healed)
        outcome.leaks = pool.give_back(cluster, backend)
        log.emit("scenario_end", leaks=outcome.leaks, kept=cluster in pool.idle.values())
        # a fault that blocked (restart_node waits for its node) is logged when it returns
        outcome.timeline.sort(key=lambda e: e["ts"])
        (out_dir / "timeline.jsonl").write_text(
            "".join(json.dumps(e, default=str) + "\n" for e in outcome.timeline))
    return outcome


def _drive(sc, cluster, outcome, rng, faults, log, on_progress) -> None:
    run_dir = outcome.run_dir
    env = {**os.environ, **cluster.driver_env()}
    proc = subprocess.Popen(cluster.driver_command(trainer_command(sc, run_dir)), cwd=REPO, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    outcome.started = time.time()
    log.emit("trainer_started", pid=proc.pid)
    tail = EventTail(run_dir / "events.jsonl")
    schedule = Schedule(sc.faults)
    heal_at: list[tuple[float, Fault]] = []
    workers: list[dict] = []
    deadline = time.monotonic() + sc.trainer.timeout_s
    try:
        while True:
            for e in tail.poll():
                log.trainer(e)
                if e["type"] == "placement":
                    workers = e["workers"]
                if on_progress:
                    on_progress(e)
            elapsed = time.time() - outcome.started
            for i, entry in schedule.due(tail.events, elapsed):
                ctx = FaultContext(cluster, run_dir, rng, workers)
                fault = FAULTS[entry.kind](entry.params, ctx)
                faults.append(fault)
                fired = time.time()  # detection is timed from the moment the fault starts
                try:
                    did = fault.inject()
                except Exception as e:
                    log.emit("fault_error", fault=entry.kind, index=i, message=str(e))
                else:
                    log.emit("fault_injected", ts=round(fired, 4), fault=entry.kind, index=i,
                             took_s=round(time.time() - fired, 3), **did)
                    if on_progress:
                        on_progress({"type": "fault_injected", "fault": entry.kind, **did})
                    if entry.for_s:
                        heal_at.append((time.monotonic() + entry.for_s, fault))
            for when, fault in list(heal_at):
                if time.monotonic() >= when:
                    heal_at.remove((when, fault))
                    healed = fault.heal()
                    if healed is not None:
                        log.emit("fault_healed", fault=fault.name, **healed)
            if proc.poll() is not None:
                break
            if time.monotonic() > deadline:
                log.emit("trainer_timeout", seconds=sc.trainer.timeout_s)
                proc.kill()
                break
            time.sleep(0.1)
    finally:
        if proc.poll() is None:
            proc.kill()
        outcome.output = proc.communicate()[0] or ""
        outcome.returncode = proc.returncode
        for e in tail.poll():
            log.trainer(e)
        if refusal := config_refusal(outcome):
            log.trainer(refusal)
        log.emit("trainer_exited", returncode=proc.returncode)


def config_refusal(outcome: Outcome) -> dict | None:
    """The trainer's refusal of its config as an ``error`` event, or None. A config the trainer
    refuses at start (exit 2, one ``trainer: ...`` line) is refused before its event log exists,
    so the refusal is known only from its output."""
    if outcome.returncode != 2 or outcome.trainer("error"):
        return None
    said = [ln for ln in outcome.output.splitlines() if ln.startswith("trainer: ")]
    if not said:
        return None
    return {"ts": round(time.time(), 4), "type": "error", "kind": "config_error",
            "message": said[-1].removeprefix("trainer: "), "from": "output"}


def _preflight(cluster, out_dir: Path, log) -> None:
    """``rlsim doctor`` on the fresh cluster, with the trainer's checkpoint directory, before the
    trainer starts; its findings go into the timeline (the ``doctor_warns`` check reads them)."""
    from rlsim import doctor

    try:
        report = doctor.examine(cluster, str(checkpoint_dir(out_dir)))
    except Exception as e:  # noqa: BLE001 - the pre-flight must not decide the scenario
        log.emit("doctor_error", message=str(e)[:500])
        return
    log.emit("doctor", seconds=report.seconds, findings=[f.line() for f in report.findings])


def _baseline(sc: Scenario, cluster, run_dir: Path, log, pool: Pool, backend: str) -> Path:
    """The fault-free twin (same config, same seed) on the same healthy cluster, run first; or
    the run directory of an identical twin this process already trained."""
    key = twin_key(trainer_command(sc, Path("<twin>")), [resolve(sc.trainer.config)],
                   cluster.spec, backend)
    if cached := pool.twin(key):
        log.emit("baseline_done", returncode=0, run_dir=str(cached), cached=True, key=key)
        return cached
    out = subprocess.run(cluster.driver_command(trainer_command(sc, run_dir)), cwd=REPO,
                         env={**os.environ, **cluster.driver_env()}, capture_output=True,
                         text=True, timeout=sc.trainer.timeout_s)
    log.emit("baseline_done", returncode=out.returncode, run_dir=str(run_dir), key=key)
    if out.returncode == 0:
        pool.keep_twin(key, run_dir)
    return run_dir


class _Recorder:
    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome

    def emit(self, type: str, ts: float | None = None, **fields) -> None:
        self.outcome.timeline.append({"ts": ts or round(time.time(), 4), "source": "rlsim",
                                      "type": type, **fields})

    def trainer(self, event: dict) -> None:
        self.outcome.timeline.append({**event, "source": "trainer"})
