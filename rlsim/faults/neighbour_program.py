"""The other user's Ray job of :mod:`rlsim.faults.neighbour_job`, run as that user:
``python job.py CONTROL WORK OWNER_PID`` with RAY_ADDRESS naming its own cluster. It runs tasks,
counting them in ``WORK/running``, until ``CONTROL/stop`` appears (or its owner, the scenario
runner, is gone): then it ends as ROLL's jobs end (its log monitor's ``stop``),
``ray.shutdown()`` and ``ray stop --force``, keeping what that said in ``WORK/ray_stop.txt``.
``CONTROL/quit`` ends it without the ray stop. Needs only Ray and the standard library."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import ray


@ray.remote(num_cpus=1)
def square(x: int) -> int:
    return x * x


def owner_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process (the owner's): it exists
        return True
    return True


def told(control: str) -> str | None:
    for word in ("stop", "quit"):
        if os.path.exists(os.path.join(control, word)):
            return word
    return None


def main(control: str, work: str, owner: int) -> int:
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
    done = 0
    while (word := told(control)) is None:
        if not owner_alive(owner):
            word = "stop"
            break
        if ray.get([square.remote(i) for i in range(4)], timeout=60) != [0, 1, 4, 9]:
            return 3
        done += 4
        with open(os.path.join(work, "running.tmp"), "w") as f:
            f.write(str(done))
        os.replace(os.path.join(work, "running.tmp"), os.path.join(work, "running"))
        time.sleep(0.2)  # a job's pace; the fault ends it by the files above
    ray.shutdown()
    if word == "quit":
        return 0
    stop = subprocess.run(["ray", "stop", "--force"], capture_output=True, text=True,
                          timeout=100)
    with open(os.path.join(work, "ray_stop.txt"), "w") as f:
        f.write(stop.stdout + stop.stderr)
    return stop.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2], int(sys.argv[3])))
