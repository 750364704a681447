"""Run a command inside one local node: ``python -m rlsim.backends.in_node SESSION INDEX CMD...``.

Enters the node's cgroups (so its memory, freezer and firewall rules apply) and takes the node's
environment labels, then execs CMD in place (same pid).
"""

import os
import sys

from rlsim.host import cgroups, procs


def main() -> None:
    session, index, cmd = sys.argv[1], sys.argv[2], sys.argv[3:]
    if cgroups.available() is None:
        cgroups.NodeGroup(session, int(index)).enter()
    os.environ.update({**procs.labels(session), procs.NODE_VAR: index})
    os.execvp(cmd[0], cmd)


if __name__ == "__main__":
    main()
