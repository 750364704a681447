"""The other user's Ray job of :mod:`rlsim.faults.neighbour_job`, run as that user:
``python job.py FOLDER OWNER_PID`` with RAY_ADDRESS naming its own cluster. It runs tasks until
``FOLDER/end`` appears (``FOLDER/running`` counts the tasks done so far) or its owner (the
scenario runner) is gone, then ends as ROLL's jobs end (its log monitor's ``stop``):
``ray.shutdown()``, then ``ray stop --force``, whose output it keeps in ``FOLDER/ray_stop.txt``.
Needs only Ray and the standard library."""

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


def main(folder: str, owner: int) -> int:
    ray.init(address=os.environ["RAY_ADDRESS"], logging_level="ERROR")
    done = 0
    while not os.path.exists(os.path.join(folder, "end")) and owner_alive(owner):
        assert ray.get([square.remote(i) for i in range(4)]) == [0, 1, 4, 9]
        done += 4
        with open(os.path.join(folder, "running.tmp"), "w") as f:
            f.write(str(done))
        os.replace(os.path.join(folder, "running.tmp"), os.path.join(folder, "running"))
        time.sleep(0.2)  # a job's pace; the fault ends it by the file above
    ray.shutdown()
    stop = subprocess.run(["ray", "stop", "--force"], capture_output=True, text=True,
                          timeout=100)
    with open(os.path.join(folder, "ray_stop.txt"), "w") as f:
        f.write(stop.stdout + stop.stderr)
    return stop.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2])))
