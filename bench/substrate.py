"""A simulated cluster spread over a substrate's machines against the same on one machine,
measured side by side in one run (root: the machines are network namespaces of this one).

    .venv/bin/python bench/substrate.py [--nodes 4] [--gpus 8] [--repeat 3] [--machines 2,4]
                                        [--largest 64] [--largest-machines 3]

Rows: time until NODES x GPUS are alive (no dashboard, as the scenarios run it) with rlsim's
local backend on this machine, and with the nodes spread over each count of namespace machines
that run a plain Ray cluster started with `ray start` (the substrate, started once per count and
not timed), node i on machine i % machines through the cluster's host actors
(rlsim.backends.substrate; a machine's second node at an address of its own); medians
compared. Then the largest cluster asked for (--largest nodes x GPUS) spread over
--largest-machines machines, once: its time to ready, its nodes alive, its teardown and what
teardown left. The machines share this machine's cores: a ratio is the substrate's own cost
(host actors, the state written to each machine, one launcher per node), not a gain.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "tests" / "integration"))

TIMED = """
import json, sys, time
from rlsim.backends.substrate.cluster import SubstrateCluster
from rlsim.host.spec import ClusterSpec
on, nodes, gpus, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spec = ClusterSpec(name=f"bench-on-{k}", nodes=nodes, gpus_per_node=gpus, dashboard=False,
                   forward_logs=False)
from rlsim.ray_internals import gcs
from rlsim.backends.substrate import hosts as substrate
gcs.join_open_cluster(on)
substrate.connect(on)  # the command's own connection to the substrate is not the cluster's
t0 = time.monotonic()
c = SubstrateCluster(spec, on=on)
with c:
    ready = time.monotonic() - t0
    alive = sum(n.alive for n in c.nodes())
    t1 = time.monotonic()
print(json.dumps({"ready_s": ready, "alive": alive, "down_s": time.monotonic() - t1,
                  "leaks": c.leaks()}), flush=True)
"""


def spread(machines: int, nodes: int, gpus: int, repeat: int, tag: str) -> list[dict]:
    """``repeat`` bring-ups of nodes x gpus over ``machines`` namespace machines."""
    import json

    import test_machines as tm

    runs = []
    with tm.substrate(machines) as (m, addresses):
        for k in range(repeat):
            out = m.run(0, [sys.executable, "-c", TIMED, f"{addresses[0]}:{tm.PORT}",
                            str(nodes), str(gpus), f"{tag}-{k}"],
                        capture_output=True, text=True, timeout=1800,
                        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                             "HOME": os.environ.get("HOME", "/root")})
            if out.returncode:
                raise SystemExit(out.stdout[-2000:] + out.stderr[-3000:])
            runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
            if runs[-1]["alive"] != nodes:
                raise SystemExit(f"only {runs[-1]['alive']} of {nodes} nodes alive")
    return runs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--machines", default="2,4", help="machine counts to spread over")
    ap.add_argument("--largest", type=int, default=64, help="nodes of the largest row (0: none)")
    ap.add_argument("--largest-machines", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/substrate.py needs root (network namespaces)", file=sys.stderr)
        return 2
    from rlsim.backends.local import LocalCluster
    from rlsim.host.spec import ClusterSpec

    one = []
    for k in range(args.repeat):
        spec = ClusterSpec(name=f"bench-one-{k}", nodes=args.nodes, gpus_per_node=args.gpus,
                           dashboard=False, forward_logs=False)
        t0 = time.monotonic()
        with LocalCluster(spec):
            one.append(time.monotonic() - t0)
    counts = [int(c) for c in args.machines.split(",") if c.strip()]
    rows = {c: spread(c, args.nodes, args.gpus, args.repeat, f"m{c}") for c in counts}
    largest, failed = [], ""
    if args.largest:
        try:
            largest = spread(args.largest_machines, args.largest, args.gpus, 1, "big")
        except SystemExit as e:  # the row says why, the others stand
            failed = str(e).strip().splitlines()[-1][:300]
    table = Table(title=f"rlsim bench: substrate ({os.cpu_count()} cores, "
                        f"{args.nodes} x {args.gpus})")
    for col in ("measure", "value", "vs one machine"):
        table.add_column(col)
    a = statistics.median(one)
    table.add_row("ready: one machine (local backend), median", f"{a:.2f} s", "1.00x")
    table.add_row("  all runs", " ".join(f"{x:.2f}" for x in one), "")
    for c, runs in rows.items():
        ready = [r["ready_s"] for r in runs]
        b = statistics.median(ready)
        table.add_row(f"ready: spread over {c} namespace machines (substrate), median",
                      f"{b:.2f} s", f"{b / a:.2f}x")
        table.add_row("  all runs", " ".join(f"{x:.2f}" for x in ready), "")
    if failed:
        table.add_row(f"largest: {args.largest} x {args.gpus} over {args.largest_machines} "
                      "machines", "failed", failed)
    if largest:
        r = largest[0]
        table.add_row(f"largest: {args.largest} x {args.gpus} over {args.largest_machines} "
                      "machines, ready", f"{r['ready_s']:.2f} s", "")
        table.add_row("  nodes alive / torn down in / left", f"{r['alive']} / "
                      f"{r['down_s']:.2f} s / {len(r['leaks'])}", "")
    Console(width=120).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
