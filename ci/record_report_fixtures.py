"""Re-record tests/fixtures/report from real catalogue runs: the timelines the report's browser
test renders.

    .venv/bin/rlsim run scenarios --report /tmp/cat
    .venv/bin/rlsim run --backend docker scenarios/python_version_mismatch.yaml --report /tmp/catd
    .venv/bin/python ci/record_report_fixtures.py /tmp/cat /tmp/catd

Keeps, of the scenarios below (one per kind of fault, a relaunch, a head loss, a refused
cluster), each one's timeline, trainer output, Ray events, baseline events and verdicts whole,
and the last lines of each node's Ray logs (enough for the links; the whole tails are ~30 KB a
node). Nothing is made up: a scenario missing from the runs is an error.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

SCENARIOS = ["node_failure_mid_run", "relaunch_after_node_restart", "partitioned_worker",
             "paused_straggler", "worker_ports_blocked", "gpu_oom_colocated", "host_oom",
             "actor_killed_by_class", "head_lost", "python_version_mismatch"]
OUT = Path(__file__).parents[1] / "tests" / "fixtures" / "report"
NODE_LOG_LINES = 12


def main(runs: list[Path]) -> None:
    found = {}
    for run in runs:
        for record in json.loads((run / "summary.json").read_text()):
            found[record["scenario"]] = (run, record)
    missing = [s for s in SCENARIOS if s not in found]
    if missing:
        sys.exit(f"not in {', '.join(map(str, runs))}: {', '.join(missing)}")
    shutil.rmtree(OUT, ignore_errors=True)
    for name in SCENARIOS:
        run, _ = found[name]
        src, dst = run / name, OUT / name
        dst.mkdir(parents=True)
        for f in ["timeline.jsonl", "ray_events.jsonl", *(p.name for p in
                                                          src.glob("trainer-*.log"))]:
            if (src / f).is_file():
                shutil.copy(src / f, dst / f)
        if (src / "baseline" / "events.jsonl").is_file():
            (dst / "baseline").mkdir()
            shutil.copy(src / "baseline" / "events.jsonl", dst / "baseline" / "events.jsonl")
        for log in sorted(src.glob("nodes/node-*.log")):
            (dst / "nodes").mkdir(exist_ok=True)
            tail = log.read_text(errors="replace").splitlines()[-NODE_LOG_LINES:]
            (dst / "nodes" / log.name).write_text("\n".join(tail) + "\n")
    (OUT / "summary.json").write_text(json.dumps([found[s][1] for s in SCENARIOS], indent=1))
    print(f"{OUT}: {len(SCENARIOS)} scenarios")


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
