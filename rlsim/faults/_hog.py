"""A memory hog: ``python -m rlsim.faults._hog MB``, run inside a node (:mod:`rlsim.host.squeeze`).

Touches MB MiB of anonymous memory and holds it until killed. Prints ``held <MiB> pid <pid>``
once all of it is resident (the pid as the node sees it, for ``kill_process``).

Its ``oom_score_adj`` is 500: below Ray's workers (1000), which the kernel must pick first, and
above the node's daemons (0). If the kernel needs a second victim before the first one's memory is
back (or a worker restarted under the cap is not yet marked 1000), it takes the hog, which ends the
pressure, and never the dashboard agent, whose death would end the raylet and the node. Raising a
score needs no privilege (lowering the daemons' would need CAP_SYS_RESOURCE).
"""

import os
import sys
import time

CHUNK = 16 * 2**20


def main() -> None:
    mb = int(sys.argv[1])
    with open("/proc/self/oom_score_adj", "w") as f:
        f.write("500")
    held = [bytearray(b"\xa5") * CHUNK for _ in range(-(-mb * 2**20 // CHUNK))]
    print(f"held {len(held) * CHUNK // 2**20} pid {os.getpid()}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
