"""Goodput: how much of a run's wall time went into training that counts, read from its events.

The definition is the field's *effective training time ratio* (ETTR; ByteRobust reports 97%
over three months, RobustRL above 80% on 256 GPUs with 10% of them failed): the time spent on
steps whose results the run kept, over the run's wall time. A step counts once, at its last
occurrence: a step done again after a resume from an earlier checkpoint makes the first time
wasted (``redone``). A step's time runs from the previous mark of the same launch (its previous
step, the launch's start or its resume, after the checkpoint was loaded) to its ``step_end``, so
start-up, checkpoint loading, detection and the restart itself are all outside it.

Wall time runs from the trainer's first event to its last, the same way for a run and for its
fault-free twin, so the two compare (Clockwork's TorchPass comparison: the faulted run's wall
against a fault-free run's, 405 min against 818 for checkpoint-restart): ``vs_twin`` is the run's
wall over the twin's, ``lost_s`` the difference, ``lost_per_fault_s`` that over the faults that
fired. Pure: events in, figures out.
"""

from __future__ import annotations

DEFINITION = ("effective training time ratio: the time of the steps the run kept (each step "
              "once, at its last occurrence; from the previous step, start or resume of its "
              "launch to its step_end) over the wall time from the trainer's first event to its "
              "last")


def _attempt(e: dict) -> int:
    attempt = e.get("attempt", 0)
    return attempt if isinstance(attempt, int) and not isinstance(attempt, bool) else 0


def _step(e: dict) -> int | None:
    step = e.get("step")
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def _ts(e: dict) -> float | None:
    ts = e.get("ts")
    return float(ts) if isinstance(ts, int | float) and not isinstance(ts, bool) else None


def measure(events: list[dict]) -> dict | None:
    """The goodput figures of a trainer's events (its own, in time order, each with ``ts`` and
    ``type``; ``attempt`` per launch): ``wall_s``, ``productive_s``, ``goodput``, ``steps``
    (kept), ``redone`` (step runs thrown away by a resume). None without a step to count."""
    timed = sorted((e for e in events if _ts(e) is not None), key=lambda e: _ts(e))
    if not timed:
        return None
    last_mark: dict[int, float] = {}
    runs: list[tuple[int, float]] = []  # (step, seconds) in order of completion
    for e in timed:
        attempt, ts = _attempt(e), _ts(e)
        if e.get("type") in ("run_start", "resume"):
            last_mark[attempt] = ts
        elif e.get("type") == "step_end" and (step := _step(e)) is not None:
            # a launch that said nothing before its first step: that step is counted as taking
            # no time (goodput is never overstated)
            runs.append((step, max(ts - last_mark.get(attempt, ts), 0.0)))
            last_mark[attempt] = ts
        else:
            last_mark.setdefault(attempt, ts)  # the launch's first word: its start, as seen
    if not runs:
        return None
    kept: dict[int, float] = {}
    for step, seconds in runs:
        kept[step] = seconds  # the last occurrence counts
    wall = _ts(timed[-1]) - _ts(timed[0])
    productive = sum(kept.values())
    return {"wall_s": round(wall, 3), "productive_s": round(productive, 3),
            "goodput": round(min(productive / wall, 1.0), 4) if wall > 0 else None,
            "steps": len(kept), "redone": len(runs) - len(kept)}


def compare(run: dict | None, twin: dict | None, faults: int) -> dict:
    """The run's figures beside its fault-free twin's: ``vs_twin`` (wall over the twin's),
    ``lost_s`` and, with faults fired, ``lost_per_fault_s``; empty without both."""
    if not run or not twin or not twin.get("wall_s"):
        return {}
    lost = run["wall_s"] - twin["wall_s"]
    out = {"twin_wall_s": twin["wall_s"], "twin_goodput": twin.get("goodput"),
           "vs_twin": round(run["wall_s"] / twin["wall_s"], 3), "lost_s": round(lost, 3)}
    if faults:
        out["lost_per_fault_s"] = round(lost / faults, 3)
    return out


MAX_TWIN_EVENTS = 64 << 20  # the twin's events.jsonl, read back whole


def of_outcome(o) -> dict | None:
    """The goodput figures of a played scenario (an :class:`rlsim.history.Outcome`): the run's,
    and beside its fault-free twin's where it had one (its ``events.jsonl``); the faults counted
    are those that disrupted the run (a remedy is none). None without a step to count."""
    from rlsim.files import Damaged, read_json_lines

    run = measure(o.trainer())
    if run is None:
        return None
    twin = None
    if o.baseline_dir is not None:
        try:
            rows, _ = read_json_lines(o.baseline_dir / "events.jsonl", MAX_TWIN_EVENTS)
            twin = measure([r for r in rows if isinstance(r, dict)])
        except (OSError, Damaged):
            twin = None
    faults = sum(1 for e in o.rlsim("fault_injected") if e.get("disruptive")
                 and not e.get("remedy"))
    return {**run, **compare(run, twin, faults), "definition": DEFINITION}


def said(g: dict) -> str:
    """The figures in words, as a verdict and ``rlsim run`` print them."""
    words = [f"goodput {g['goodput']:.2f} ({g['productive_s']:.1f} s of {g['wall_s']:.1f} s on "
             f"the {g['steps']} steps kept)" if g.get("goodput") is not None else
             "goodput unknown (no wall time)"]
    if g.get("redone"):
        words.append(f"{g['redone']} step run(s) redone after a resume")
    if g.get("vs_twin") is not None:
        words.append(f"wall {g['vs_twin']:.2f}x the fault-free twin's ({g['twin_wall_s']:.1f} s"
                     f", goodput {g['twin_goodput']:.2f})" if g.get("twin_goodput") is not None
                     else f"wall {g['vs_twin']:.2f}x the fault-free twin's")
    if g.get("lost_per_fault_s") is not None:
        words.append(f"{g['lost_per_fault_s']:.1f} s lost per fault")
    return "; ".join(words)
