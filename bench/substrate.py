"""A simulated cluster spread over a substrate's machines against the same on one machine,
measured side by side in one run (root: the machines are network namespaces of this one).

    .venv/bin/python bench/substrate.py [--nodes 4] [--gpus 8] [--repeat 3]

Rows: time until NODES x GPUS are alive (no dashboard, as the scenarios run it) with rlsim's
local backend on this machine, and with the nodes spread over NODES namespace machines that run
a plain Ray cluster started with `ray start` (the substrate, started once and not timed), node i
on machine i, through the cluster's host actors (rlsim.backends.substrate); medians compared.
The machines share this machine's cores: the ratio is the substrate's own cost (host actors,
the state written to each machine, one launcher per node), not a gain.
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
from rlsim.backends.substrate import SubstrateCluster
from rlsim.host.spec import ClusterSpec
on, nodes, gpus, k = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
spec = ClusterSpec(name=f"bench-on-{k}", nodes=nodes, gpus_per_node=gpus, dashboard=False,
                   forward_logs=False)
from rlsim import substrate
substrate.connect(on)  # the command's own connection to the substrate is not the cluster's
t0 = time.monotonic()
with SubstrateCluster(spec, on=on) as c:
    print(json.dumps({"ready_s": time.monotonic() - t0,
                      "alive": sum(n.alive for n in c.nodes())}), flush=True)
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=4)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/substrate.py needs root (network namespaces)", file=sys.stderr)
        return 2
    import json

    import test_machines as tm

    from rlsim.backends.local import LocalCluster
    from rlsim.host.spec import ClusterSpec

    one, spread = [], []
    with tm.substrate(args.nodes) as (m, addresses):
        for k in range(args.repeat):
            spec = ClusterSpec(name=f"bench-one-{k}", nodes=args.nodes, gpus_per_node=args.gpus,
                               dashboard=False, forward_logs=False)
            t0 = time.monotonic()
            with LocalCluster(spec):
                one.append(time.monotonic() - t0)
            out = m.run(0, [sys.executable, "-c", TIMED, f"{addresses[0]}:{tm.PORT}",
                            str(args.nodes), str(args.gpus), str(k)],
                        capture_output=True, text=True, timeout=300,
                        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT),
                             "HOME": os.environ.get("HOME", "/root")})
            if out.returncode:
                print(out.stdout[-2000:] + out.stderr[-3000:], file=sys.stderr)
                return 1
            got = json.loads(out.stdout.strip().splitlines()[-1])
            if got["alive"] != args.nodes:
                print(f"only {got['alive']} of {args.nodes} nodes alive", file=sys.stderr)
                return 1
            spread.append(got["ready_s"])
    table = Table(title=f"rlsim bench: substrate ({os.cpu_count()} cores, "
                        f"{args.nodes} x {args.gpus})")
    for col in ("measure", "value", "vs one machine"):
        table.add_column(col)
    a, b = statistics.median(one), statistics.median(spread)
    table.add_row("ready: one machine (local backend), median", f"{a:.2f} s", "1.00x")
    table.add_row("  all runs", " ".join(f"{x:.2f}" for x in one), "")
    table.add_row(f"ready: spread over {args.nodes} namespace machines (substrate), median",
                  f"{b:.2f} s", f"{b / a:.2f}x")
    table.add_row("  all runs", " ".join(f"{x:.2f}" for x in spread), "")
    Console(width=120).print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
