"""neighbour_job: another user's Ray job on this machine ends while the trainer runs, the way
ROLL's jobs end (ROLL#348: two jobs on one host, the second killed when the first finished).

The other job is its own Ray cluster (a head at :data:`ADDRESS`, its own ports and folder) with
a driver running tasks on it, started as another user before the trainer starts. When the fault
fires the job ends as ROLL's log monitor ends it: ``ray.shutdown()``, then ``ray stop
--force``, which SIGKILLs every process on the machine that looks like Ray's and that its user
may signal. Run as the trainer's own user that is every raylet, GCS and worker of the trainer's
cluster too: the report. Run as another user, the kernel refuses each of those kills. The fault
records which of this cluster's processes the ``ray stop`` reached for and was refused, and
which were gone after it (``touched``: the trainer's actors among them).

The other user is, unless the scenario names one, a user id of its own for this run that no
account and no process on the machine has: its ``ray stop`` can stop nothing but its own job.
A named user must exist, must not be the user running rlsim, and must run nothing here when the
job starts (its ``ray stop`` would kill that too). The job runs this machine's Python and Ray
with one capability kept, ``CAP_DAC_READ_SEARCH`` (read any file): where the interpreter lives
under a folder only root may read (``/root/.pyenv``), another user could not start it at all,
while on a shared server both users read one install. It has no power over other users'
processes. The fault's own files (the job's program, its log, the word to end) are in a folder
of root's; the job writes only in a folder of its own, which root reads without following links.
"""

from __future__ import annotations

import os
import pwd
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing, suppress
from pathlib import Path

from pydantic import Field

from rlsim.backends.base import LabelsProcesses
from rlsim.faults.base import Fault
from rlsim.fields import Strict
from rlsim.files import new_file, read_text, write_file
from rlsim.host import procs
from rlsim.ray_internals import stop

PROGRAM = Path(__file__).with_name("neighbour_program.py")
ADDRESS = "127.76.0.1"  # a loopback address of no rlsim cluster (Ray turns 127.0.0.1 into the
# machine's own address)
START_TIMEOUT_S = 120.0  # its head and first tasks, on a machine the trainer keeps busy
END_TIMEOUT_S = 120.0  # its shutdown and ray stop (SIGKILLs, then a 10 s grace at most)
OWN_UIDS = range(61000, 65000)  # where a user id of its own is picked (below nobody's 65534)


class NeighbourJob(Fault):
    name = "neighbour_job"
    impairs = "another job ended"
    by_hand = False
    needs = (LabelsProcesses,)
    harms_real_cluster = True

    class Params(Strict):
        user: str | None = Field(None, min_length=1, max_length=64, pattern=r"^[a-z_][a-z0-9_.-]*$",
                                 description="the Unix user whose job it is (it must run nothing "
                                 "here); unset: a user id of its own for this run")

    @classmethod
    def unavailable(cls) -> str | None:
        if os.geteuid() != 0:
            return "running a job as another user needs root"
        if shutil.which("setpriv") is None:
            return "it runs the other job with setpriv (util-linux), which is not installed"
        return None

    # -- the other job's life ------------------------------------------------------------------
    def setup(self) -> None:
        """Start the other user's cluster and job, and wait until it runs tasks."""
        self.folder: Path | None = None
        self.job: subprocess.Popen | None = None
        self.uid, self.who = self._user()
        self.folder = Path(tempfile.mkdtemp(prefix="rlsim-neighbour-"))  # root's, 0700
        self.folder.chmod(0o755)  # the job reads its program here
        self.work = self.folder / "work"
        self.work.mkdir(mode=0o700)
        os.chown(self.work, self.uid, self.uid)
        shutil.copy(PROGRAM, self.folder / "job.py")
        self.port = _free_port()
        head = self._as_user(["ray", "start", "--head", "--node-ip-address", ADDRESS,
                              "--port", str(self.port), "--temp-dir", str(self.work / "ray"),
                              "--num-cpus", "1", "--num-gpus", "0", "--include-dashboard",
                              "false", "--ray-client-server-port", str(_free_port()),
                              "--dashboard-agent-listen-port", str(_free_port()),
                              "--disable-usage-stats"])
        started = subprocess.run(head, env=self._env(), capture_output=True, text=True,
                                 timeout=START_TIMEOUT_S, cwd=self.work)
        if started.returncode != 0:
            raise RuntimeError(f"neighbour_job: {self.who}'s Ray head did not start (exit "
                               f"{started.returncode}): {_tail(started.stderr)}")
        with new_file(self.folder / "job.log") as log:
            self.job = subprocess.Popen(
                self._as_user([sys.executable, str(self.folder / "job.py"), str(self.folder),
                               str(self.work), str(os.getpid())]),
                env={**self._env(), "RAY_ADDRESS": f"{ADDRESS}:{self.port}"}, cwd=self.work,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while self._tasks() is None:
            if self.job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"neighbour_job: {self.who}'s job did not start running "
                                   f"tasks within {START_TIMEOUT_S:g} s (exit "
                                   f"{self.job.poll()}): {_tail(self._log())}")
            time.sleep(0.1)  # the job says it runs by a file it writes: nothing to block on

    def inject(self):
        """End the other job as ROLL's ends: its driver shuts down and runs ray stop --force."""
        before = self._cluster_pids()
        self._end("stop")
        said = self._said()
        if self.job.returncode != 0 or said is None:
            raise RuntimeError(f"neighbour_job: {self.who}'s job failed as it ended (exit "
                               f"{self.job.returncode}): {_tail(self._log())}")
        read = stop.said(said)
        after = self._cluster_pids()
        refused = read["refused"]
        gone = sorted(set(before) - set(after))
        reached = [pid for pid in [r["pid"] for r in refused] + gone if pid in before]
        return {"user": self.who, "job_address": f"{ADDRESS}:{self.port}",
                "job_tasks": self._tasks(),
                "ray_stop": {"stopped": read["stopped"], "refused": len(refused),
                             "refused_of_this_cluster": sum(r["pid"] in before
                                                            for r in refused),
                             **({"unread": read["unread"]} if read["unread"] else {})},
                "refused": refused, "gone": gone,
                "nodes_reached": sorted({before[p] for p in reached if before[p] is not None})}

    def said(self, did):
        r = did["ray_stop"]
        return (f"{did['user']}'s Ray job ended with ray stop --force: it stopped "
                f"{r['stopped']} Ray process(es) of its own, and was refused "
                f"{r['refused']} of other users' ({r['refused_of_this_cluster']} of this "
                "cluster's)")

    def touched(self, did, footprint):
        """What of the trainer its ``ray stop`` reached: its processes that the ray stop was
        refused or that were gone after it (``gone``), and all of it on a node one of whose
        processes (the raylet, an agent) it reached (``nodes_reached``): which of a node's
        processes ``ray stop`` picks differs by release (Ray 2.48 titles a worker in its
        command line only), its raylet is always among them."""
        pids = {r["pid"] for r in did.get("refused", [])} | set(did.get("gone", []))
        nodes = set(did.get("nodes_reached", []))
        return [a for a in footprint if a.get("pid") in pids or a.get("node") in nodes]

    def teardown(self):
        """The other job ended quietly if the fault never fired (no ray stop: a named user's
        other processes are not the story's to kill), then what is left of it killed (none,
        after its own ray stop) and its folders removed."""
        if getattr(self, "folder", None) is None:
            return None
        ended = None
        if self.job is not None and self.job.poll() is None:
            try:
                self._end("quit")
            except RuntimeError as e:  # killed: what is left of it is killed below
                ended = str(e)[:300]
        left = self._leftovers()
        procs.signal_all(left, signal.SIGKILL)
        procs.wait_gone(left)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
        return {"user": self.who, "killed": len(left), **({"trouble": ended} if ended else {})}

    # -- helpers ---------------------------------------------------------------------------------
    def _user(self) -> tuple[int, str]:
        """The other user's id and how the record names it: the named user's, checked now (on
        the machine that runs the job), or a user id no account or process here has."""
        running = set(procs.owners().values())
        if self.params.user is None:
            taken = {u.pw_uid for u in pwd.getpwall()} | running
            uid = random.SystemRandom().choice([u for u in OWN_UIDS if u not in taken])
            return uid, f"uid {uid}"
        try:
            uid = pwd.getpwnam(self.params.user).pw_uid
        except KeyError:
            raise ValueError(f"neighbour_job.user: no user {self.params.user!r} on this "
                             f"machine; create one (useradd {self.params.user}), or leave user "
                             "out for a user id of the job's own") from None
        if uid == os.geteuid():
            raise ValueError(f"neighbour_job.user: {self.params.user!r} runs rlsim here: its "
                             "ray stop --force would stop every Ray cluster of that user on "
                             "this machine (the report itself, beyond what rlsim can heal); "
                             "name another user, or leave user out")
        if uid in running:
            raise ValueError(f"neighbour_job.user: {self.params.user!r} runs processes here, "
                             "which its job's ray stop --force could kill; name a user that "
                             "runs nothing, or leave user out")
        return uid, self.params.user

    def _as_user(self, argv: list[str]) -> list[str]:
        return ["setpriv", f"--reuid={self.uid}", f"--regid={self.uid}", "--clear-groups",
                "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *argv]

    def _env(self) -> dict[str, str]:
        """A plain environment: nothing of the trainer's cluster (its address, its token), the
        cluster's labels (a reaper finds what of the job keeps them), this Python's ``ray``
        first on PATH."""
        bin_dir = str(Path(sys.executable).parent)
        return {"PATH": os.pathsep.join([bin_dir, "/usr/bin", "/bin"]),
                "HOME": str(self.work), "TMPDIR": str(self.work), "LANG": "C.UTF-8",
                "USER": "rlsim-neighbour", "LOGNAME": "rlsim-neighbour",
                "RAY_USAGE_STATS_ENABLED": "0", **self.ctx.cluster.process_labels()}

    def _end(self, how: str) -> None:
        """Tell the job to end (``stop``: with ray stop --force; ``quit``: without) and wait."""
        write_file(self.folder / how, "")
        try:
            self.job.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self.job.kill()
            self.job.wait()
            raise RuntimeError(f"neighbour_job: {self.who}'s job did not end within "
                               f"{END_TIMEOUT_S:g} s of being told to; killed: "
                               f"{_tail(self._log())}") from None

    def _tasks(self) -> int | None:
        """How many tasks the job has run, as it says (None: none yet)."""
        with suppress(OSError):
            said = read_text(self.work / "running", limit=64).strip()
            return int(said) if said.isdigit() else None
        return None

    def _said(self) -> str | None:
        with suppress(OSError):
            return read_text(self.work / "ray_stop.txt", limit=1 << 20)
        return None

    def _log(self) -> str:
        with suppress(OSError):
            return read_text(self.folder / "job.log", limit=1 << 20)
        return ""

    def _cluster_pids(self) -> dict[int, int | None]:
        """This cluster's processes here now (pid -> node index), less the job's own (it
        carries the cluster's labels, for the reaper)."""
        owner = procs.owners()
        return {pid: node for pid, node in self.ctx.cluster.processes_here().items()
                if owner.get(pid) != self.uid}

    def _leftovers(self) -> list[int]:
        """The other job's processes still here: its user's, working in its folder (every
        process its ``ray start`` began does; their labels do not survive Ray's rewriting of
        their titles)."""
        work, left = str(self.work), []
        for pid, uid in procs.owners().items():
            if uid == self.uid:
                with suppress(OSError):
                    cwd = os.readlink(procs.PROC / str(pid) / "cwd").removesuffix(" (deleted)")
                    if cwd == work or cwd.startswith(work + os.sep):
                        left.append(pid)
        return left


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind((ADDRESS, 0))
        return s.getsockname()[1]


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"
