"""The scenario catalogue's cost: wall time with xdist, harness overhead, detection, recovery.

    .venv/bin/python bench/scenarios.py [-n 2] [-k EXPR] [--compare-reuse] [--compare-warm]
                                        [--against REV [--fixed NAME,...] [--fixed-only]
                                         [--repeat R]]
                                        [--slow]

Runs ``pytest scenarios -n N --rlsim-report DIR`` once, then reads each scenario's timeline:
cluster bring-up, the fault-free twin (``matches_baseline``), the trainer's own wall time, and
what is left (the harness: polling, fault injection, healing, teardown, leak checks). Overhead is
that rest against the trainer's time. Detection and recovery are the checks' figures (seconds from
the fault to the trainer's first loss event, and to its first step after the restart).

With ``--compare-reuse`` the catalogue runs twice in one go, first with ``--no-reuse`` (a cluster
started and stopped per scenario, no twin cache) then with clusters shared between scenarios of
one shape: both walls, their ratio (target: reuse at most half), and whether every scenario's check
outcomes are identical both ways (the reuse-equivalence check).

Fixed cost, apart from each scenario's story: ``ready`` (scenario start to cluster ready: zero
when a pooled cluster is reused), ``doctor`` (the pre-flight checks between ready and the trainer's
launch: counted, since the warm workers import while it runs, and a shorter doctor only moves
their wait into the first step), ``first step`` (the trainer's launch to its first step: the
driver's imports, placement, the workers' start and set-up) and ``teardown`` (the trainer's exit to
the scenario's end: heal, leak checks, giving the cluster back). With ``--compare-warm`` the
catalogue runs twice in one go, first with ``RLSIM_WARM_WORKERS=0`` (workers forked cold when the
trainer's actors ask) then with warm workers (started ahead with torch and the trainer's worker
imported; see ``rlsim.scenario.runner.warm_up``): both walls, each scenario's first step both
ways, and whether the verdicts are identical.

With ``--against REV`` the catalogue of git revision REV (a worktree, run with this venv) runs
first, then this checkout's: both walls, the CPU the machine spent on each (``/proc/stat``: with
``-n 2`` on two cores the catalogue is CPU-bound, its wall is its CPU over the cores), and whether
the verdicts are identical (every change to speed must leave them so). Between them, each
scenario of ``--fixed`` runs alone on a cluster of its own, as ``rlsim run FILE`` runs it, at
REV and then here, in turn: its fixed cost both ways (in the catalogue, with reuse and a second
scenario on the other core, the fixed cost is mostly the other scenario's CPU). A docker node of a
REV older than its PYTHONPATH (rlsim.backends.docker.node_pythonpath) imports this checkout's
rlsim from the venv, not REV's: where node-side code changed between them (the doctor's probe),
its docker scenarios differ by construction.

Targets (measured here, not asserted in tests, whose limits are loose bounds against hangs): the
catalogue in <= 10 min, overhead <= 10%, detection <= 2 s and recovery <= 15 s after a node kill.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).parents[1]
TARGETS = {"overhead": 0.10, "detected_within_s": 2.0, "recovered_within_s": 15.0}


def fmt(value: dict, check: str) -> str:
    v = value.get(check)
    return "" if v is None else f"{v:.2f}" + ("" if v <= TARGETS[check] else " (over)")


def spans(timeline: Path) -> dict[str, float]:
    events = [e for e in map(json.loads, timeline.read_text().splitlines())
              if e["source"] == "rlsim"]
    ev = {e["type"]: e["ts"] for e in events}
    total = ev["scenario_end"] - ev["scenario_start"]
    if "cluster_ready" not in ev:  # refused at start (a version mismatch): all of it is bring-up
        return {"total": total, "bringup": total, "twin": 0.0, "trainer": 0.0, "harness": 0.0,
                "first_step": None, "teardown": None, "doctor": 0.0}
    bringup = ev["cluster_ready"] - ev["scenario_start"]
    firsts = [e["ts"] for e in map(json.loads, timeline.read_text().splitlines())
              if e["source"] == "trainer" and e["type"] == "step_end"]
    twin = ev.get("baseline_done", ev["cluster_ready"]) - ev["cluster_ready"]
    # every launch of the trainer (a relaunched one has several), not only the last
    starts = [e["ts"] for e in events if e["type"] == "trainer_started"]
    exits = [e["ts"] for e in events if e["type"] == "trainer_exited"]
    trainer = sum(b - a for a, b in zip(starts, exits, strict=False))
    first = (min(firsts) - starts[-1]) if firsts and starts and min(firsts) > starts[-1] \
        else (min(firsts) - starts[0] if firsts and starts else None)
    teardown = ev["scenario_end"] - exits[-1] if exits else None
    doctor = next((e["seconds"] for e in events if e["type"] == "doctor"), 0.0)
    return {"total": total, "bringup": bringup, "twin": twin, "trainer": trainer,
            "harness": total - bringup - twin - trainer, "first_step": first,
            "teardown": teardown, "doctor": doctor}


def cpu_busy_s() -> float:
    """Seconds of CPU the whole machine has spent busy since boot (``/proc/stat``): the
    difference over a run counts every process of it, Ray's detached ones included."""
    fields = Path("/proc/stat").read_text().splitlines()[0].split()[1:]
    user, nice, system, _idle, _iowait, irq, softirq, steal = map(int, fields[:8])
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK")


def run_catalogue(n: str, k: str | None, extra: list[str], env: dict[str, str] | None = None,
                  root: Path = ROOT, paths: tuple[str, ...] = ("scenarios",)
                  ) -> tuple[float, Path, str, float]:
    """One ``pytest`` run of the scenarios at ``paths`` of the checkout at ``root``: wall
    seconds, its report folder, pytest's summary line, CPU seconds the machine spent busy."""
    report = Path(tempfile.mkdtemp(prefix="rlsim-bench-scenarios-"))
    workers = ["-p", "no:xdist"] if n == "0" else ["-n", n, "--dist", "loadscope"]
    cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider", *workers,
           "--rlsim-report", str(report), *extra] + (["-k", k] if k else [])
    t0, cpu0 = time.monotonic(), cpu_busy_s()
    out = subprocess.run(cmd, cwd=root, capture_output=True, text=True,
                         env={**os.environ, **(env or {})})
    last = out.stdout.strip().splitlines()[-1] if out.stdout.strip() else "no output"
    return time.monotonic() - t0, report, last, cpu_busy_s() - cpu0


def outcomes(report: Path) -> dict[str, dict[str, bool]]:
    """Each scenario's check outcomes: ``{scenario: {check: ok}}``."""
    found = {}
    for verdicts in report.glob("*/verdicts.json"):
        rec = json.loads(verdicts.read_text())
        found[rec["scenario"]] = {c["check"]: c["ok"] for c in rec["checks"]}
    return found


def spans_table(report: Path, title: str) -> Table:
    table = Table(title=title)
    for col in ("scenario", "ok", "total s", "bring-up s", "first step s", "teardown s",
                "twin s", "trainer s", "harness s", "overhead", "detected s", "recovered s"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for verdicts in sorted(report.glob("*/verdicts.json")):
        rec = json.loads(verdicts.read_text())
        s = spans(verdicts.parent / "timeline.jsonl")
        value = {c["check"]: c["value"] for c in rec["checks"]}
        overhead = s["harness"] / s["trainer"] if s["trainer"] else 0.0
        table.add_row(rec["scenario"], "yes" if rec["ok"] else "NO", f"{s['total']:.1f}",
                      f"{s['bringup']:.1f}", _opt(s["first_step"]), _opt(s["teardown"]),
                      f"{s['twin']:.1f}", f"{s['trainer']:.1f}",
                      f"{s['harness']:.1f}", f"{100 * overhead:.0f}%"
                      + ("" if overhead <= TARGETS["overhead"] else " (over)"),
                      fmt(value, "detected_within_s"), fmt(value, "recovered_within_s"))
    return table


def _opt(v: float | None) -> str:
    return "" if v is None else f"{v:.1f}"


def fixed_costs(report: Path) -> dict[str, dict]:
    return {v.parent.name: spans(v.parent / "timeline.jsonl")
            for v in sorted(report.glob("*/verdicts.json"))}


@contextlib.contextmanager
def checkout(rev: str):
    """A worktree of git revision ``rev`` and the environment that runs its code with this venv
    (its folder first on the path: the driver, the node launchers and Ray's workers inherit it)."""
    folder = Path(tempfile.mkdtemp(prefix="rlsim-bench-rev-")) / "tree"
    subprocess.run(["git", "worktree", "add", "--detach", str(folder), rev], cwd=ROOT,
                   check=True, capture_output=True)
    try:
        yield folder, {"PYTHONPATH": str(folder)}
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(folder)], cwd=ROOT,
                       capture_output=True)


def compare_outcomes(label_a: str, a: Path, label_b: str, b: Path) -> None:
    """Print whether both runs' check outcomes are identical, and each scenario that differs
    (one whose checks themselves changed between the two revisions is said apart: its file
    differs, so only its overall verdict compares)."""
    x, y = outcomes(a), outcomes(b)
    differ = [n for n in sorted(set(x) | set(y)) if x.get(n) != y.get(n)]
    rewritten = [n for n in differ if n in x and n in y and set(x[n]) != set(y[n])]
    same = all(all(x[n].values()) == all(y[n].values()) for n in rewritten) \
        and not set(differ) - set(rewritten)
    print(f"check outcomes identical, {label_a} and {label_b}: {'yes' if same else 'NO'}")
    for name in differ:
        if name in rewritten:
            print(f"  {name}: its checks changed between the two (now {sorted(y[name])}); "
                  f"{label_a} {'passed' if all(x[name].values()) else 'FAILED'}, {label_b} "
                  f"{'passed' if all(y[name].values()) else 'FAILED'}")
        else:
            print(f"  {name}: {label_a} {x.get(name)} / {label_b} {y.get(name)}")


# The fixed-cost table's scenarios, each run alone on a cluster of its own (as `rlsim run FILE`
# does) at both revisions in turn: the reference trainer's stories, a vLLM one; --slow adds the
# Ray Train job, a vLLM resume and the real verl (skipped where verl is not installed)
REFERENCE = ["node_failure_mid_run", "resume_equals_uninterrupted", "hung_actor_rank",
             "segfault_actor_rank", "partitioned_worker", "preempted_node"]
FIXED = [*REFERENCE, "vllm_engine_killed_idle"]
FIXED_SLOW = ["ray_train_node_lost", "vllm_resume_equals_uninterrupted", "verl_real_node_lost"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-n", default="2", help="pytest-xdist workers")
    ap.add_argument("-k", default=None, help="select scenarios (pytest -k)")
    ap.add_argument("--compare-reuse", action="store_true",
                    help="run it with --no-reuse, then with reuse; compare walls and outcomes")
    ap.add_argument("--compare-warm", action="store_true",
                    help="run it with cold workers (RLSIM_WARM_WORKERS=0), then warm; compare")
    ap.add_argument("--slow", action="store_true",
                    help="include the slow tier (--rlsim-slow): the vLLM and verl stories")
    ap.add_argument("--against", metavar="REV",
                    help="first run the catalogue of git revision REV (a worktree, this venv); "
                         "compare walls, CPU and outcomes with this checkout's, and each of "
                         "--fixed's scenarios alone at both, in turn")
    ap.add_argument("--fixed", default=None,
                    help="with --against: the scenarios (names, comma-separated) whose fixed "
                         "cost is measured alone at both revisions (default: a set of the "
                         "reference trainer's and a vLLM story; --slow adds Ray Train, verl)")
    ap.add_argument("--fixed-only", action="store_true",
                    help="with --against: only the scenarios run alone, no catalogue")
    ap.add_argument("--repeat", type=int, default=1,
                    help="with --against: runs of each scenario alone at each revision (in "
                         "turn; each figure is their median)")
    args = ap.parse_args()
    console = Console(width=190)
    slow = ["--rlsim-slow"] if args.slow else []
    results = {}
    if args.against:
        with checkout(args.against) as (tree, env):
            names = args.fixed.split(",") if args.fixed else FIXED + FIXED_SLOW * args.slow
            if args.fixed_only:
                print_fixed(fixed_alone(console, args.against, tree, env, names, slow,
                                        args.repeat), args.against)
                return
            wall, report, last, cpu = run_catalogue(args.n, args.k, slow, env, root=tree)
            results[args.against] = (wall, report, cpu)
            console.print(spans_table(report, f"scenario catalogue at {args.against}: pytest -n "
                                              f"{args.n}, wall {wall:.0f} s, CPU {cpu:.0f} s "
                                              f"({last})"))
            alone = fixed_alone(console, args.against, tree, env, names, slow, args.repeat)
    runs = [("no reuse", ["--no-reuse"], {})] if args.compare_reuse else []
    runs += [("cold workers", [], {"RLSIM_WARM_WORKERS": "0"})] if args.compare_warm else []
    runs.append(("reuse", [], {}))
    for label, extra, env in runs:
        wall, report, last, cpu = run_catalogue(args.n, args.k, extra + slow, env)
        results[label] = (wall, report, cpu)
        console.print(spans_table(report, f"scenario catalogue ({label}): pytest -n {args.n}, "
                                          f"wall {wall:.0f} s, CPU {cpu:.0f} s ({last})"))
        print(f"report: {report}/report.html")
    wall = results["reuse"][0]
    print(f"catalogue wall {wall:.0f} s against a 600 s target: "
          f"{'met' if wall <= 600 else 'missed'}")
    if args.compare_reuse:
        base = results["no reuse"][0]
        print(f"reuse / no reuse wall: {wall:.0f} s / {base:.0f} s = {wall / base:.2f} "
              f"(target <= 0.50: {'met' if wall / base <= 0.5 else 'missed'})")
        compare_outcomes("no reuse", results["no reuse"][1], "reuse", results["reuse"][1])

    if args.compare_warm:
        cold, hot = fixed_costs(results["cold workers"][1]), fixed_costs(results["reuse"][1])
        table = Table(title="first step (trainer launch to its first step), cold vs warm workers")
        for col in ("scenario", "cold s", "warm s", "warm / cold"):
            table.add_column(col, justify="left" if col == "scenario" else "right")
        ratios = []
        for name in sorted(set(cold) & set(hot)):
            a, b = cold[name]["first_step"], hot[name]["first_step"]
            if a and b:
                ratios.append(b / a)
                table.add_row(name, f"{a:.2f}", f"{b:.2f}", f"{b / a:.2f}")
        console.print(table)
        if ratios:
            print(f"first step, warm / cold, median over {len(ratios)} scenarios: "
                  f"{statistics.median(ratios):.2f}")
        base = results["cold workers"][0]
        print(f"catalogue wall, warm / cold: {wall:.0f} s / {base:.0f} s = {wall / base:.2f}")
        compare_outcomes("cold", results["cold workers"][1], "warm", results["reuse"][1])
    if args.against:
        print_against(console, args.against, results[args.against], results["reuse"], alone)


def fixed_alone(console: Console, rev: str, tree: Path, env: dict[str, str], names: list[str],
                slow: list[str], repeat: int = 1) -> dict[str, tuple[dict, dict]]:
    """Each scenario of ``names`` run alone (no xdist, a cluster of its own: what ``rlsim run
    FILE`` pays), at ``rev`` then in this checkout, ``repeat`` times, one run after the other so
    that a slow spell of the machine falls on both: ``{name: (spans at rev, spans now)}``, each
    figure the median of its runs (skipped ones left out). Prints the table: the fixed cost
    (ready + doctor + first step + teardown) and the whole scenario, both ways."""
    found = {}
    for name in names:
        path = (f"scenarios/{name}.yaml",)
        runs: list[list] = [[], []]
        verdicts: list[set] = [set(), set()]
        for _ in range(repeat):
            for side, (root, extra_env) in enumerate(((tree, env), (ROOT, {}))):
                _, report, last, _ = run_catalogue("0", None, ["--no-reuse", *slow], extra_env,
                                                   root=root, paths=path)
                timeline = report / name / "timeline.jsonl"
                if timeline.exists():
                    runs[side].append(spans(timeline))
                    verdicts[side].add(json.dumps(outcomes(report), sort_keys=True))
        if runs[0] and runs[1]:
            found[name] = (_median(runs[0]), _median(runs[1]))
        same = "verdicts identical" if runs[0] and runs[1] and len(verdicts[0] | verdicts[1]) == 1 \
            else "verdicts DIFFER" if runs[0] and runs[1] else "not run both ways"
        print(f"alone: {name}: {last}; {same}")
    table = Table(title=f"fixed cost per scenario, each alone on a cluster of its own, {rev} vs "
                        f"this checkout (seconds, median of {repeat}; fixed = ready + doctor + "
                        "first step + teardown)")
    for col in ("scenario", "ready", "doctor", "first step", "teardown", "fixed", "whole",
                "fixed now / before", "whole now / before"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    for name, (a, b) in found.items():
        fa, fb = _fixed(a), _fixed(b)
        table.add_row(name, *(f"{_opt(a[k])} -> {_opt(b[k])}" for k in
                              ("bringup", "doctor", "first_step", "teardown")),
                      f"{_opt(fa)} -> {_opt(fb)}", f"{a['total']:.1f} -> {b['total']:.1f}",
                      f"{fb / fa:.2f}" if fa and fb else "",
                      f"{b['total'] / a['total']:.2f}")
    console.print(table)
    return found


def _median(runs: list[dict]) -> dict:
    """Each figure of ``runs`` (spans) as its median; None where a run has none."""
    return {k: None if any(r[k] is None for r in runs) else statistics.median(r[k] for r in runs)
            for k in runs[0]}


def print_fixed(alone: dict[str, tuple[dict, dict]], rev: str) -> None:
    """The reference trainer's fixed cost against the target (at most half); the other
    stories' (vLLM, Ray Train, verl) said beside it."""
    ratios = {n: _fixed(b) / _fixed(a) for n, (a, b) in alone.items() if _fixed(a) and _fixed(b)}
    ours = [r for n, r in ratios.items() if n in REFERENCE]
    if ours:
        print(f"the reference trainer's fixed cost alone, this checkout / {rev}, over "
              f"{len(ours)} scenarios: median {statistics.median(ours):.2f}, worst {max(ours):.2f} "
              f"(target: at most 0.50 each: {'met' if max(ours) <= 0.5 else 'missed'})")
    others = {n: r for n, r in ratios.items() if n not in REFERENCE}
    if others:
        print("other stories' fixed cost, this checkout / " + rev + ": "
              + ", ".join(f"{n} {r:.2f}" for n, r in others.items()))


def _fixed(s: dict) -> float | None:
    parts = [s["bringup"], s["doctor"], s["first_step"], s["teardown"]]
    return None if None in parts else sum(parts)


def print_against(console: Console, rev: str, before: tuple[float, Path, float],
                  now: tuple[float, Path, float], alone: dict[str, tuple[dict, dict]]) -> None:
    """The catalogue's wall and CPU at ``rev`` and in this checkout, the fixed costs of the
    scenarios run alone, and whether every verdict is the same."""
    print_fixed(alone, rev)
    print(f"catalogue wall, this checkout / {rev}: {now[0]:.0f} s / {before[0]:.0f} s = "
          f"{now[0] / before[0]:.2f}; CPU the machine spent: {now[2]:.0f} s / {before[2]:.0f} s "
          f"= {now[2] / before[2]:.2f}")
    compare_outcomes(rev, before[1], "this checkout", now[1])


if __name__ == "__main__":
    main()
