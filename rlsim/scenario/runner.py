"""Run one scenario: cluster up, trainer started, faults fired on schedule, all healed, a timeline.

Along Jepsen's lines: the driver loop here starts the trainer and every 100 ms hands its new events
(:mod:`rlsim.history`) to the nemesis (:mod:`rlsim.scenario.nemesis`), which fires the
faults that are due and heals those whose ``for_s`` is up. Every fault is healed at the end
whatever happened (trainer crash, a check's failure, Ctrl-C); the cluster is given back or torn
down; then leaks are looked for. The merged timeline (trainer events and rlsim's fault and cluster
events, by time) is what the checks (:mod:`rlsim.checks`) judge.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import random
import shutil
import subprocess
import sys
import time
from dataclasses import asdict
from pathlib import Path

from rlsim.adapters import ADAPTERS, TrainerLaunch
from rlsim.backends import DEFAULT, chosen
from rlsim.backends.base import (
    ClusterStartError,
    HoldsGpuMemory,
    KeepsLogs,
    ReportsRay,
    SpreadsOverMachines,
    StartsClusters,
    WarmsWorkers,
)
from rlsim.checks import CHECKS
from rlsim.events import ATTEMPT_VAR, HOLD_VAR, RUN_DIR_VAR
from rlsim.faults import FAULTS, FaultContext
from rlsim.faults.footprint import where as said_where
from rlsim.files import new_file, read_file, write_file
from rlsim.history import MAX_HISTORY, Outcome, Recorder
from rlsim.host.spec import ClusterSpec
from rlsim.result import ScenarioResult
from rlsim.scenario import twins as twin_records
from rlsim.scenario.nemesis import Nemesis
from rlsim.scenario.pool import Pool, preload_modules, warm
from rlsim.scenario.runnable import check_runnable
from rlsim.scenario.schema import Scenario
from rlsim.scenario.watch import WatchProcess
from rlsim.scenario.watchdog import Watchdog

_names = itertools.count()


def _launch_of(run_dir: Path, attempt: int, ray_address: str) -> TrainerLaunch:
    return TrainerLaunch(python=sys.executable, run_dir=run_dir, attempt=attempt,
                  ray_address=ray_address)


def trainer_command(sc: Scenario, run_dir: Path, attempt: int = 0,
                    ray_address: str = "") -> list[str]:
    """The argv of one launch of the scenario's trainer, through its adapter."""
    return ADAPTERS[sc.trainer.adapter].command(sc.trainer,
                                                _launch_of(run_dir, attempt, ray_address))


def launch_env(sc: Scenario, run_dir: Path, attempt: int,
               ray_address: str = "", holds: tuple[int, ...] = ()) -> dict[str, str]:
    """What a launch adds to the environment: the scenario's own variables, the adapter's,
    where rlsim's event log goes and the steps where it waits for a fault to fire
    (:mod:`rlsim.events`)."""
    launch = _launch_of(run_dir, attempt, ray_address)
    return {**sc.trainer.env, **ADAPTERS[sc.trainer.adapter].env(sc.trainer, launch),
            RUN_DIR_VAR: str(run_dir), ATTEMPT_VAR: str(attempt),
            HOLD_VAR: ",".join(map(str, holds))}


def warm_up(sc: Scenario, cluster, log: Recorder) -> None:
    """Start the workers the trainer's next launch will place its actors on, so that they import
    its modules while the harness does other things (the doctor, the twin): where the backend
    starts workers and the adapter says how many. Called when the cluster is ready, when the
    twin starts (for the run after it) and before a relaunch."""
    if not (warm() and isinstance(cluster, WarmsWorkers)):
        return
    _, per_node = ADAPTERS[sc.trainer.adapter].warm_workers(sc.trainer,
                                                            cluster.spec.node_shapes())
    if per_node:
        log.emit("workers_prestarted", per_node=cluster.prestart_workers(per_node))


def _start(sc: Scenario, cluster, run_dir: Path, attempt: int, holds: tuple[int, ...] = (),
           **popen) -> subprocess.Popen:
    """One launch of the trainer as a driver of ``cluster``, in the folder the trainer runs in
    (the scenario's, or its ``trainer.cwd``), waiting at ``holds`` for rlsim's faults."""
    extra = launch_env(sc, run_dir, attempt, cluster.address, holds)
    cmd = cluster.driver_command(trainer_command(sc, run_dir, attempt, cluster.address), extra,
                                 sc.trainer.workdir)
    return subprocess.Popen(cmd, cwd=sc.trainer.workdir,
                            env={**os.environ, **cluster.driver_env(), **extra},
                            **popen)


def make_cluster(sc: Scenario, backend: str = DEFAULT, ray_address: str | None = None,
                 out_dir: Path | None = None):
    """The scenario's cluster on ``backend``, not started yet; its nodes see ``out_dir`` (the run
    directory's parent). Raises ``Unsupported`` as :func:`check_runnable` does."""
    cls = check_runnable(sc, backend)
    node_local = sc.cluster.checkpoint_storage == "node_local"
    # built after the checks above: a missing interpreter is a skip there, not a spec error
    spec = ClusterSpec(name=f"sc{os.getpid()}-{next(_names)}", **sc.cluster.shape(),
                       # the dashboard where the trainer's Ray libraries need it (its adapter
                       # says); without it a 3-node cluster is up 2.5-5 s sooner and 0.9 GB
                       # smaller, and the `ray` event says what the cluster leaves out
                       dashboard=ADAPTERS[sc.trainer.adapter].needs_dashboard,
                       forward_logs=sc.forwards_logs,
                       health=sc.cluster.health,
                       preload_modules=preload_modules(sc.trainer),
                       # the run's folder, and the folder the trainer runs in (the scenario's)
                       mounts=[str(out_dir.resolve()), str(sc.trainer.workdir)] if out_dir
                       else [str(sc.trainer.workdir)],
                       node_local=[str(checkpoint_dir(out_dir))] if out_dir and node_local
                       else [])
    return cls.make(spec, ray_address, on=sc.cluster.on, gpu_faults=any(
        HoldsGpuMemory in FAULTS[f.kind].needs for f in sc.faults))


def checkpoint_dir(out_dir: Path) -> Path:
    """The trainer's checkpoint directory in a scenario's output directory (its default)."""
    return out_dir.resolve() / "run" / "checkpoints"


def play(sc: Scenario, out_dir: Path, *, backend: str = DEFAULT, ray_address: str | None = None,
         pool: Pool | None = None, twins: twin_records.Twins | None = None,
         seed: int | None = None, on_progress=None) -> ScenarioResult:
    """Run ``sc``, judge it by its checks and record the result: the one way a scenario is played
    (``rlsim run`` and the pytest plugin both come here). The result is written once, to
    ``<out_dir>/verdicts.json``, and returned with the history it was judged from; ``Unsupported``
    (a skip) propagates before anything starts."""
    from rlsim.checks import judge

    t0 = time.monotonic()
    outcome = run_scenario(sc, out_dir, seed=seed, on_progress=on_progress, backend=backend,
                           ray_address=ray_address, pool=pool, twins=twins)
    result = ScenarioResult.of(sc.name, judge(outcome), time.monotonic() - t0, outcome)
    result.write(out_dir / "verdicts.json")
    return result


def run_scenario(sc: Scenario, out_dir: Path, seed: int | None = None,
                 on_progress=None, backend: str = DEFAULT,
                 ray_address: str | None = None, pool: Pool | None = None,
                 twins: twin_records.Twins | None = None) -> Outcome:
    """Run ``sc`` with its outputs under ``out_dir``; never raises for a trainer failure
    (``Unsupported`` when the backend cannot run it, before anything starts).

    With a ``pool``, a running cluster of the same shape left clean by an earlier scenario is
    used instead of starting one, and this one is kept for the next (see rlsim.scenario.pool);
    without, the cluster is started and stopped here.

    A previous run's outputs there move to ``<out_dir>.previous`` (one generation kept): the trainer
    would resume from its checkpoints and the schedule would read its events.
    """
    pool = pool or Pool(reuse=False)
    twins = twins or twin_records.Twins()
    out_dir = out_dir.resolve()  # every path handed to a trainer is absolute ({run_dir} too)
    fresh = make_cluster(sc, backend, ray_address, out_dir)
    if out_dir.exists() and any(out_dir.iterdir()):
        previous = out_dir.with_name(out_dir.name + ".previous")
        shutil.rmtree(previous, ignore_errors=True)
        out_dir.rename(previous)
    out_dir.mkdir(parents=True, exist_ok=True)
    # kept by the backend that runs it: a substrate's cluster (cluster.on) is no local one
    kept_as = chosen(backend, sc.cluster.on)
    cluster, reused = pool.take(fresh, kept_as)  # from here on it is always given back
    try:
        outcome = Outcome(sc, out_dir / "run")
        log = Recorder(outcome)
        rng = random.Random(sc.seed if seed is None else seed)
        log.emit("scenario_start", name=sc.name, seed=sc.seed if seed is None else seed)
        nemesis = Nemesis(sc.faults, FaultContext(
            cluster, outcome.run_dir, rng, roles=sc.trainer.roles,
            core=ADAPTERS[sc.trainer.adapter].core_actors), log, on_progress)
    except BaseException:
        # a fault that cannot be built (a plugin's constructor raised): the kept cluster this
        # scenario was handed goes back too, or it ran on with no one to stop it
        pool.give_back(cluster, kept_as)
        raise
    try:
        if not reused:
            try:
                cluster.start()
            except (ClusterStartError, TimeoutError) as e:  # judged by `refused`, never a crash
                outcome.refusal = str(e)
                log.emit("cluster_refused", message=str(e)[:2000])
                return outcome
        # a cluster spread over a substrate says where each node runs: what differs from one
        # machine (rlsim.backends.substrate)
        where = cluster.spread() if isinstance(cluster, SpreadsOverMachines) else {}
        log.emit("cluster_ready", nodes=[n.address for n in cluster.nodes()], reused=reused,
                 **where)
        _ray_report(sc, cluster, log)
        _standin_report(cluster, log)
        warm_up(sc, cluster, log)
        nemesis.setup()  # before the doctor: it examines the storage the trainer will use
        if not reused or any(name.startswith("doctor_") for name, _ in sc.checks()):
            _preflight(cluster, out_dir, log)
        else:  # examined when it was fresh, and checked clean since (rlsim.scenario.pool)
            log.emit("doctor_skipped", reason="cluster reused; no doctor check in this scenario")
        if any(CHECKS[name].twin for name, _ in sc.checks()):
            outcome.baseline_dir = _twin(sc, cluster, out_dir / "baseline", log, twins,
                                         backend)
        _drive(sc, cluster, outcome, nemesis, log, on_progress)
    finally:  # whatever happened (Ctrl-C in a heal too), the cluster is given back
        try:
            nemesis.heal_all()
            if outcome.refusal is None:  # a refused cluster's logs are in its refusal
                _keep_node_logs(cluster, out_dir / "nodes", log)
        finally:
            try:
                outcome.leaks, outcome.leaks_waited_s = pool.give_back(
                    cluster, kept_as, log, reusable=not downs_a_node(sc))
            finally:
                log.emit("scenario_end", leaks=[asdict(x) for x in outcome.leaks],
                         leaks_waited_s=outcome.leaks_waited_s,
                         kept=cluster in pool.idle.values())
                log.write(out_dir / "timeline.jsonl")
    return outcome


def downs_a_node(sc: Scenario) -> bool:
    """Whether a fault of ``sc`` takes a node down, for good or for a restart: its cluster is
    not handed on (rlsim.scenario.pool says why)."""
    return sc.may_down_node or any(FAULTS[f.kind].node_state == "restarting" for f in sc.faults)


def _standin_report(cluster, log: Recorder) -> None:
    """The ``cuda_standin`` event where the cluster has the device stand-in: on which nodes
    torch saw the fake GPUs as CUDA devices, and where what it fakes is told."""
    spec = cluster.spec  # a real cluster's may be None until it is started
    if spec is None or not spec.cuda_standin:
        return
    nodes = [n.index for n in spec.node_shapes() if not n.cuda_devices]
    log.emit("cuda_standin", nodes=nodes, fidelity="docs/concepts/device-standin.md")


def _ray_report(sc, cluster, log: Recorder) -> None:
    """The ``ray`` event: the installed Ray, which of rlsim's accelerations this run has and
    which it runs without (and why), the auth mode the cluster's GCS enforces, and what the
    adapter changed of the trainer's Ray settings. Never raises: a report that cannot be made
    is said in the event."""
    from rlsim import ray_internals
    from rlsim.ray_internals.gcs import auth_in_force

    try:
        report = (cluster.ray_report() if isinstance(cluster, ReportsRay) else
                  {**ray_internals.summary(), "auth": auth_in_force(cluster.address)})
        report["trainer_env"] = _adapter_ray_env(sc)
        report["leaves_out"] = _left_out(cluster)
    except Exception as e:  # noqa: BLE001 - a report must not decide the scenario
        report = {"error": f"{type(e).__name__}: {e}"[:300]}
    log.emit("ray", **report)


def _left_out(cluster) -> dict[str, str]:
    """The daemons of a real Ray cluster this lean one runs without, and why."""
    spec = cluster.spec
    out = {}
    if spec is not None and not spec.dashboard:
        out["dashboard"] = ("the trainer's adapter uses no Ray library that reads it (Ray "
                            "Train, Data, Jobs); its agents run minimal")
    if spec is not None and not spec.forward_logs:
        out["log monitors"] = "actors' prints stay in each node's worker logs"
    return out


def _adapter_ray_env(sc) -> dict[str, str]:
    """The Ray settings the scenario's adapter adds to the trainer's environment."""
    env = ADAPTERS[sc.trainer.adapter].env(sc.trainer, _launch_of(Path("."), 0, ""))
    return {k: v for k, v in env.items() if k.startswith("RAY_")}


def _keep_node_logs(cluster, where: Path, log: Recorder, lines: int = 300) -> None:
    """The tail of each node's Ray logs as ``nodes/node-<i>.log`` beside the timeline (the report
    links them): the cluster's own directory goes when it is stopped. A real cluster's logs are
    its owner's (not read). Never raises: a log that cannot be kept is a timeline event."""
    # a protocol of methods alone: its isinstance reads none of the instance's properties,
    # which raise for a cluster that refused to start
    if not isinstance(cluster, KeepsLogs):
        return
    try:
        where.mkdir(exist_ok=True)
        for i in range(cluster.spec.nodes):
            write_file(where / f"node-{i}.log", cluster.logs(i, lines) + "\n")
    except Exception as e:  # noqa: BLE001 - a missing log must not decide the scenario
        log.emit("node_logs_error", message=f"{type(e).__name__}: {e}"[:300])


def _drive(sc, cluster, outcome, nemesis: Nemesis, log: Recorder, on_progress) -> None:
    """Start the trainer and, every 100 ms until it exits or times out, read its new events (and
    Ray's, :mod:`rlsim.scenario.watch`) and let the nemesis fire and heal what is due. A trainer
    that exits non-zero is launched again, up to ``relaunch.max`` times, as a scheduler would."""
    run_dir = outcome.run_dir
    tail = ADAPTERS[sc.trainer.adapter].events(sc.trainer, run_dir)
    # a cluster rlsim started answers to rlsim's token; a real one is the user's to watch
    watch = WatchProcess(cluster.address, [n.address for n in cluster.nodes()],
                         run_dir.parent / "ray_events.jsonl") \
        if sc.watches_ray and isinstance(cluster, StartsClusters) else None
    deadline = time.monotonic() + sc.trainer.timeout_s
    relaunches = sc.trainer.relaunch.max if sc.trainer.relaunch else 0
    dog = Watchdog(sc.trainer.progress_watchdog_s)
    outcome.started = time.time()
    if sc.trainer.prepare and not _prepare(sc, cluster, outcome, log, deadline):
        return
    try:
        for attempt in range(relaunches + 1):
            if attempt:
                log.emit("relaunch", attempt=attempt, returncode=outcome.returncode)
            proc, output = _launch(sc, cluster, run_dir, attempt, log, nemesis.hold_steps())
            dog.launch(time.monotonic())
            try:
                ended = _follow(proc, tail, watch, nemesis, log, on_progress, outcome,
                                deadline, dog, output, attempt < relaunches)
            finally:
                if proc.poll() is None:
                    proc.kill()
                _wait_killed(proc, nemesis)
                outcome.output += read_file(output, MAX_HISTORY).decode(errors="replace")
                outcome.returncode = proc.returncode
                for e in tail.poll() + tail.exited(attempt, proc.returncode):
                    log.trainer(e)
                log.emit("trainer_exited", returncode=proc.returncode, attempt=attempt)
            if ended == "timeout" or proc.returncode == 0 or (ended == "stalled" and not (
                    sc.trainer.relaunch and sc.trainer.relaunch.on_stall)):
                break
    finally:
        if watch is not None:
            watch.close()
    if refusal := config_refusal(outcome):
        log.trainer(refusal)


def _prepare(sc, cluster, outcome, log: Recorder, deadline: float) -> bool:
    """Run the trainer's ``prepare`` command (output to ``prepare.log`` beside the run
    directory); True when it exited 0. Otherwise the run ends here, its exit status and output
    the trainer's."""
    run_dir = outcome.run_dir
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    launch = _launch_of(run_dir, 0, cluster.address)
    argv = [launch.fill(arg) for arg in sc.trainer.prepare]
    output = run_dir.parent / "prepare.log"
    started = time.monotonic()
    with new_file(output) as out:
        proc = subprocess.Popen(argv, cwd=sc.trainer.workdir, stdout=out,
                                stderr=subprocess.STDOUT,
                                env={**os.environ, **launch_env(sc, run_dir, 0, cluster.address)})
    try:
        proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:  # the run's time is up
        proc.kill()
        proc.wait()
    except BaseException:  # Ctrl-C: nothing of it is left running
        proc.kill()
        proc.wait()
        raise
    log.emit("trainer_prepared", returncode=proc.returncode,
             seconds=round(time.monotonic() - started, 2))
    if proc.returncode != 0:
        outcome.returncode = proc.returncode
        outcome.output += read_file(output, MAX_HISTORY).decode(errors="replace")
    return proc.returncode == 0


def _launch(sc, cluster, run_dir: Path, attempt: int, log: Recorder, holds: tuple[int, ...]):
    """Start one launch of the trainer; its output goes to ``trainer-<attempt>.log`` beside the
    run directory (a file, not a pipe: a talkative trainer would fill a pipe and stall). It
    waits at ``holds`` until the faults due there fired (:mod:`rlsim.events`)."""
    run_dir.parent.mkdir(parents=True, exist_ok=True)
    output = run_dir.parent / f"trainer-{attempt}.log"
    if attempt > 0:  # the first launch's workers were started with the cluster (or the twin)
        warm_up(sc, cluster, log)
    with new_file(output) as out:
        proc = _start(sc, cluster, run_dir, attempt, holds, stdout=out,
                      stderr=subprocess.STDOUT)
    log.emit("trainer_started", pid=proc.pid, attempt=attempt,
             **({"holds": list(holds)} if holds else {}))
    return proc, output


def _follow(proc, tail, watch, nemesis: Nemesis, log: Recorder, on_progress, outcome,
            deadline: float, dog: Watchdog, output: Path, more: bool) -> str | None:
    """Until the launch exits: new events into the timeline, due faults fired. ``timeout`` when
    the run's time is up, ``stalled`` when the trainer stalled after a fault
    (:mod:`rlsim.scenario.watchdog`; ``more``: a relaunch is left, which ``relaunch.on_stall``
    takes): the launch is then killed. None when it exited."""
    sc = outcome.scenario
    # what counts as progress: the trainer's events; for one whose steps are not seen, its output
    chatty = "step_end" not in ADAPTERS[sc.trainer.adapter].observes
    said = 0
    while True:
        now = time.monotonic()
        for e in tail.poll():
            log.trainer(e)
            dog.sign(now)
            if on_progress:
                on_progress(e)
        if chatty and (size := _size(output)) > said:
            said = size
            dog.sign(now)
        for e in watch.poll() if watch is not None else []:
            log.emit(**e)
        seen = tail.events + (watch.events if watch is not None else [])
        nemesis.tick(seen, time.time() - outcome.started)
        nemesis.release(outcome.run_dir)
        if nemesis.disrupted_at is not None and nemesis.disrupted_at != dog.fault_at:
            dog.fault(nemesis.disrupted_at)
        if proc.poll() is not None:
            return None
        if time.monotonic() > deadline:
            log.emit("trainer_timeout", seconds=sc.trainer.timeout_s)
            return "timeout"
        if (silent := dog.silent_s(time.monotonic())) is not None:
            _stalled(silent, nemesis, log, output,
                     relaunch=more and bool(sc.trainer.relaunch and sc.trainer.relaunch.on_stall))
            return "stalled"
        time.sleep(0.1)


def _size(path: Path) -> int:
    with contextlib.suppress(OSError):
        return path.stat().st_size
    return 0


def _stalled(silent: float, nemesis: Nemesis, log: Recorder, output: Path,
             relaunch: bool) -> None:
    """Say that the trainer stalled after a fault: how long, after which fault, its last output
    lines and what of it Ray holds on dead nodes, and whether the killed launch is relaunched
    (``relaunch.on_stall``) or the run ends, as at its timeout."""
    last = next((e for e in reversed(log.outcome.timeline) if e["type"] == "fault_injected"
                 and e.get("disruptive") and not e.get("remedy")), {})
    text = read_file(output, MAX_HISTORY).decode(errors="replace") if output.exists() else ""
    lines = [line[:300] for line in text.splitlines() if line.strip()][-8:]
    died = [{"kind": "actor", "class": e.get("class"), "node": e.get("node")}
            for e in log.outcome.timeline if e["type"] == "ray_actor_died"
            and e.get("ts", 0) >= last.get("ts", 0)]
    log.emit("trainer_stalled", seconds=round(silent, 1),
             bound_s=log.outcome.scenario.trainer.progress_watchdog_s,
             fault=f"{last.get('fault', '?')} (faults[{last.get('index', '?')}])",
             last_lines=lines, died=said_where(died), relaunched=relaunch,
             **nemesis.waits_on())


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


STOP_WAIT_S = 5.0


def _wait_killed(proc: subprocess.Popen, nemesis: Nemesis) -> None:
    """Wait for the killed trainer. A process blocked by a fault still in force dies only once
    that fault is lifted: a write to a capped device (slow_storage: the kernel finishes the write
    first, at the cap), a node frozen by pause_node. Seen: a SIGKILLed trainer took 106 s to exit
    while its checkpoint writes ran at a 0.01 MB/s cap, and a Ctrl-C at 0.2 MB/s outlasted 90 s.
    So when it is not gone in a few seconds, the faults that fired are healed first (healing is
    safe twice: the scenario's teardown heals them again, finding nothing left)."""
    try:
        proc.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        nemesis.heal_fired()
        proc.wait()


def _twin(sc: Scenario, cluster, run_dir: Path, log, twins: twin_records.Twins,
          backend: str) -> Path:
    """The fault-free twin (same config, same seed) on the same healthy cluster, run first; or
    the record of an identical twin this process trained or an earlier run kept
    (:mod:`rlsim.scenario.twins`). What it is and when it was made go to ``outcome``'s
    ``baseline_about`` and the timeline's ``baseline_done``."""
    about = twin_records.inputs(trainer_command(sc, Path("<twin>")), cluster.spec, backend,
                                {**sc.trainer.env, **ADAPTERS[sc.trainer.adapter].env(
                                    sc.trainer, _launch_of(Path("<twin>"), 0, ""))})
    key = twin_records.key(about, ADAPTERS[sc.trainer.adapter].inputs(sc.trainer))
    if cached := twins.found(key, sc):
        where, record = cached
        log.outcome.baseline_about = {**record, "cached": True}
        log.emit("baseline_done", returncode=0, run_dir=str(where), cached=True, key=key,
                 made=record.get("made"), made_in=record.get("from_run_dir"))
        return where
    proc = _start(sc, cluster, run_dir, 0, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    warm_up(sc, cluster, log)  # for the run after the twin
    try:
        proc.wait(timeout=sc.trainer.timeout_s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    kept = {}
    if proc.returncode == 0:
        record = twins.keep(key, run_dir, about)
        log.outcome.baseline_about = {**record, "cached": False}
        kept = {"made": record["made"], "not_kept": record["not_kept"]} \
            if "not_kept" in record else {"made": record["made"], "kept": True}
    log.emit("baseline_done", returncode=proc.returncode, run_dir=str(run_dir), key=key,
             cached=False, **kept)
    return run_dir
