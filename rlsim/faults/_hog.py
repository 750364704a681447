"""A memory hog: ``python -m rlsim.faults._hog MB``, run inside a node (``node_command``).

Touches MB MiB of anonymous memory and holds it until killed. Prints ``held <MiB> pid <pid>``
once all of it is resident (the pid as the node sees it, for ``kill_process``).
"""

import os
import sys
import time

CHUNK = 16 * 2**20


def main() -> None:
    mb = int(sys.argv[1])
    held = [bytearray(b"\xa5") * CHUNK for _ in range(-(-mb * 2**20 // CHUNK))]
    print(f"held {len(held) * CHUNK // 2**20} pid {os.getpid()}", flush=True)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
