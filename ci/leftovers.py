"""After the test suite: fail when a cluster started during it still runs, naming what started
it, then tear it down (a test's cluster must be gone when the suite ends, whether the test passed
or not). Usage: python ci/leftovers.py SINCE, SINCE the suite's start in seconds since the epoch.
Clusters started before SINCE (another user's, a developer's own) are not looked at."""

from __future__ import annotations

import sys

from rlsim.backends.reaper import reap
from rlsim.host import state


def main(since: float) -> int:
    left = [st for st in state.load_all() if st.created >= since]
    for st in left:
        owner = "alive" if state.owner_alive(st) else "gone"
        print(f"LEFT RUNNING: cluster {st.spec.name} (slot {st.slot}, {st.backend}, owner pid "
              f"{st.owner_pid} {owner}), started by: {st.origin or 'not recorded'}",
              file=sys.stderr)
        reap(st)
    return 1 if left else 0


if __name__ == "__main__":
    sys.exit(main(float(sys.argv[1])))
