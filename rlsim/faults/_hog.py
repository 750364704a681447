"""A memory hog inside one node: ``python -m rlsim.faults._hog SESSION INDEX MB``.

Enters the node's cgroups, touches MB MiB of anonymous memory and holds it until killed. Prints
``held`` once all of it is resident. Labelled like the node's own processes, so the leak scan and
node teardown find it.
"""

import sys
import time

from rlsim import cgroups

CHUNK = 16 * 2**20


def main() -> None:
    session, index, mb = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    cgroups.NodeGroup(session, index).enter()
    held = [bytearray(b"\xa5") * CHUNK for _ in range(-(-mb * 2**20 // CHUNK))]
    print(f"held {len(held) * CHUNK // 2**20}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
