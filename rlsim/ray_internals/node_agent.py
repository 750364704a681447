"""The dashboard agent of a node whose cluster has no dashboard:
``python -m rlsim.ray_internals.node_agent <Ray's agent arguments>``.

Ray's raylet starts a dashboard agent beside itself, ends itself when the agent dies, and the
agent loads every module under ``ray.dashboard.modules`` (jobs, logs, reporter, events, state,
metrics) to serve the dashboard head and the metrics exporter. A cluster started without the
dashboard and without metrics has no client for any of them, yet each agent imported them for
about 1.5 s of CPU per node, most of a node's start on two cores. Here Ray's own agent runs (its
logging, its watch on the raylet, its SIGTERM handling) as a minimal Ray install runs it: no gRPC
or HTTP server, and no module loaded.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> None:
    import ray
    import ray.dashboard.utils

    # the dashboard head's modules: nothing calls them in a cluster without a dashboard
    ray.dashboard.utils.get_all_modules = lambda module_type: []
    script = str(Path(ray.__file__).parent / "dashboard" / "agent.py")
    sys.argv = [script, *sys.argv[1:], "--minimal"]
    runpy.run_path(script, run_name="__main__")


if __name__ == "__main__":
    main()
