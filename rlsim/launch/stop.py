"""Stop the Ray processes of one launcher job on this node, and nothing else:
``python -m rlsim.launch.stop TEMP_DIR`` ends every process whose command line names TEMP_DIR
(the job's own ``ray start --temp-dir``: the GCS, raylet and agents all carry it), SIGTERM first,
SIGKILL after a grace. ``ray stop`` would end every Ray process of the host, another job's too.
Prints what it stopped; exit 0."""

from __future__ import annotations

import contextlib
import os
import sys

import psutil

SLURM = ("srun", "slurmstepd")  # their steps end once the Ray processes in them have


def rays_of(cmdline: list[str], temp_dir: str) -> bool:
    """Whether a command line is one of the job's Ray processes: an option whose value lies in
    ``temp_dir`` (``--temp-dir=``, ``--log_dir=``, ``--session_dir=``...). This helper's own
    command line names the dir as a bare argument, and is not matched."""
    root = temp_dir.rstrip("/")
    return any(a.startswith("--") and (v := a.partition("=")[2]) and
               (v == root or v.startswith(root + "/")) for a in cmdline)


def stop(temp_dir: str, grace_s: float = 5.0) -> list[int]:
    """End this node's processes of the job's Ray (:func:`rays_of`); their pids."""
    found = [p for p in psutil.process_iter(["pid", "name", "cmdline"])
             if p.info["name"] not in SLURM and p.info["pid"] != os.getpid()
             and rays_of(p.info["cmdline"] or [], temp_dir)]
    for p in found:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.terminate()
    _, alive = psutil.wait_procs(found, timeout=grace_s)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    return [p.pid for p in found]


def main(argv: list[str]) -> int:
    if len(argv) != 1 or len(argv[0]) < 8 or not argv[0].startswith("/"):
        print("usage: python -m rlsim.launch.stop /tmp/ray-rlsim-<job id> (an absolute, "
              "job-specific directory)", file=sys.stderr)
        return 2
    pids = stop(argv[0])
    print(f"rlsim launch: stopped {len(pids)} Ray process(es) of {argv[0]} on "
          f"{os.uname().nodename}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
