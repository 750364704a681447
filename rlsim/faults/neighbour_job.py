"""neighbour_job: another user's Ray job on this machine ends while the trainer runs, the way
ROLL's jobs end (ROLL#348: two jobs on one host, the second killed when the first finished).

The other job is its own Ray cluster (a head on 127.0.0.1, its own ports and folder) with a
driver running tasks on it, started as ``user`` before the trainer starts. When the fault fires
the job ends as ROLL's log monitor ends it: ``ray.shutdown()``, then ``ray stop --force``, which
SIGKILLs every process on the machine that looks like Ray's and that its user may signal. Run
as the trainer's own user that is every raylet, GCS and worker of the trainer's cluster too:
the report. Run as another user, the kernel refuses each of those kills; the fault records
which of the trainer's processes the ``ray stop`` reached for and was refused (``touched``),
and how many of its own job's it stopped.

The other user runs this machine's Python and Ray with one capability kept,
``CAP_DAC_READ_SEARCH`` (read any file): on a machine where the interpreter lives under a
folder only root may read (``/root/.pyenv``) that user could not start Python at all, while on
a shared server both users read one install. It has no power over other users' processes.
Refused for the user running rlsim: that ``ray stop`` would also stop every other Ray cluster
of that user on the machine, which nothing could heal.
"""

from __future__ import annotations

import os
import pwd
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from contextlib import closing, suppress
from pathlib import Path

from pydantic import Field, field_validator

from rlsim.backends.base import LabelsProcesses
from rlsim.faults.base import Fault
from rlsim.fields import Strict
from rlsim.host import procs

PROGRAM = Path(__file__).with_name("neighbour_program.py")
START_TIMEOUT_S = 120.0  # its head and first tasks, on a machine the trainer keeps busy
END_TIMEOUT_S = 120.0  # its shutdown and ray stop (SIGKILLs, then a 10 s grace at most)
_REFUSED = re.compile(r"Could not terminate .* due to \(pid=(\d+)(?:, name='([^']*)')?")
_STOPPED = re.compile(r"Stopped (?:all (\d+)|only (\d+) out of \d+) Ray processes")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")


class NeighbourJob(Fault):
    name = "neighbour_job"
    impairs = "another job ended"
    by_hand = False
    needs = (LabelsProcesses,)
    harms_real_cluster = True

    class Params(Strict):
        user: str = Field("nobody", min_length=1, max_length=64,
                          description="the Unix user whose job it is (not the one running "
                          "rlsim); its ray stop stops every Ray process of this user here")

        @field_validator("user")
        @classmethod
        def _another_user(cls, user: str) -> str:
            try:
                uid = pwd.getpwnam(user).pw_uid
            except KeyError:
                raise ValueError(f"no user {user!r} on this machine; create one (useradd "
                                 f"{user}) or name one that exists (nobody)") from None
            if uid == os.geteuid():
                raise ValueError(f"{user!r} runs rlsim here: its ray stop --force would stop "
                                 "every Ray cluster of that user on this machine (the report "
                                 "itself, beyond what rlsim can heal); name another user "
                                 "(nobody)")
            return user

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
        user = pwd.getpwnam(self.params.user)
        self.folder = Path(tempfile.mkdtemp(prefix="rlsim-neighbour-"))
        os.chown(self.folder, user.pw_uid, user.pw_gid)
        shutil.copy(PROGRAM, self.folder / "job.py")
        self.port = _free_port()
        self.job = None
        head = self._as_user(["ray", "start", "--head", "--node-ip-address", "127.0.0.1",
                              "--port", str(self.port), "--temp-dir", str(self.folder / "ray"),
                              "--num-cpus", "1", "--num-gpus", "0", "--include-dashboard",
                              "false", "--ray-client-server-port", str(_free_port()),
                              "--dashboard-agent-listen-port", str(_free_port()),
                              "--disable-usage-stats"])
        started = subprocess.run(head, env=self._env(), capture_output=True, text=True,
                                 timeout=START_TIMEOUT_S, cwd=self.folder)
        if started.returncode != 0:
            raise RuntimeError(f"neighbour_job: {self.params.user}'s Ray head did not start "
                               f"(exit {started.returncode}): {_tail(started.stderr)}")
        log = (self.folder / "job.log").open("wb")
        with log:
            self.job = subprocess.Popen(
                self._as_user([sys.executable, str(self.folder / "job.py"), str(self.folder),
                               str(os.getpid())]),
                env={**self._env(), "RAY_ADDRESS": f"127.0.0.1:{self.port}"}, cwd=self.folder,
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + START_TIMEOUT_S
        while not (self.folder / "running").exists():
            if self.job.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"neighbour_job: {self.params.user}'s job did not start "
                                   f"running tasks within {START_TIMEOUT_S:g} s (exit "
                                   f"{self.job.poll()}): {_tail(self._log())}")
            time.sleep(0.1)  # the job says it runs by a file it writes: nothing to block on

    def inject(self):
        """End the other job as ROLL's ends: its driver shuts down and runs ray stop --force."""
        before = self._cluster_pids()
        (self.folder / "end").write_text("")
        try:
            code = self.job.wait(timeout=END_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            raise RuntimeError(f"neighbour_job: {self.params.user}'s job did not end within "
                               f"{END_TIMEOUT_S:g} s of being told to: {_tail(self._log())}") \
                from None
        said = _ANSI.sub("", (self.folder / "ray_stop.txt").read_text(errors="replace")) \
            if (self.folder / "ray_stop.txt").exists() else ""
        if code != 0 or not said:
            raise RuntimeError(f"neighbour_job: {self.params.user}'s job failed as it ended "
                               f"(exit {code}): {_tail(self._log())}")
        stopped, refused = ray_stop_said(said)
        after = self._cluster_pids()
        tasks = (self.folder / "running").read_text().strip()
        return {"user": self.params.user, "job_address": f"127.0.0.1:{self.port}",
                "job_tasks": int(tasks) if tasks.isdigit() else None,
                "ray_stop": {"stopped": stopped, "refused": len(refused),
                             "refused_of_this_cluster": sum(r["pid"] in before
                                                            for r in refused)},
                "refused": refused, "gone": sorted(before - after)}

    def said(self, did):
        r = did["ray_stop"]
        return (f"{did['user']}'s Ray job ended with ray stop --force: it stopped "
                f"{r['stopped']} Ray process(es) of its own, and was refused "
                f"{r['refused']} of other users' ({r['refused_of_this_cluster']} of this "
                "cluster's)")

    def touched(self, did, footprint):
        """The trainer's processes its ``ray stop`` reached for: refused, or gone by the time
        it ended (``gone``: this cluster's processes alive before and not after)."""
        pids = {r["pid"] for r in did.get("refused", [])} | set(did.get("gone", []))
        return [a for a in footprint if a.get("pid") in pids]

    def teardown(self):
        """The other job ended, if the fault never fired (as it would have: its own ray stop),
        then whatever is left of it killed (none, after its ray stop) and its folder removed."""
        if getattr(self, "folder", None) is None:
            return None
        if self.job is not None and self.job.poll() is None:
            (self.folder / "end").write_text("")
            try:
                self.job.wait(timeout=END_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                self.job.kill()
                self.job.wait()
        left = self._leftovers()
        procs.signal_all(left, signal.SIGKILL)
        procs.wait_gone(left)
        shutil.rmtree(self.folder, ignore_errors=True)
        self.folder = None
        return {"user": self.params.user, "killed": len(left)}

    def _leftovers(self) -> list[int]:
        """The other job's processes still here: its user's, working in its folder (every
        process its ``ray start`` began does; their labels do not survive Ray's rewriting of
        their titles)."""
        uid, folder = pwd.getpwnam(self.params.user).pw_uid, str(self.folder)
        left = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit() and _uid(int(entry.name)) == uid:
                with suppress(OSError):
                    cwd = os.readlink(entry / "cwd").removesuffix(" (deleted)")
                    if cwd == folder or cwd.startswith(folder + os.sep):
                        left.append(int(entry.name))
        return left

    # -- helpers ---------------------------------------------------------------------------------
    def _cluster_pids(self) -> set[int]:
        """This cluster's processes on this machine now, less the other job's own."""
        uid = pwd.getpwnam(self.params.user).pw_uid
        session = self.ctx.cluster.process_labels()[procs.SESSION_VAR]
        return {pid for pid in procs.find(session) if _uid(pid) != uid}

    def _as_user(self, argv: list[str]) -> list[str]:
        user = pwd.getpwnam(self.params.user)
        return ["setpriv", f"--reuid={user.pw_uid}", f"--regid={user.pw_gid}", "--clear-groups",
                "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search", *argv]

    def _env(self) -> dict[str, str]:
        """A plain environment: nothing of the trainer's cluster (its address, its token), the
        cluster's labels (a reaper finds what is left of the job), this Python's ``ray`` first
        on PATH."""
        bin_dir = str(Path(sys.executable).parent)
        return {"PATH": os.pathsep.join([bin_dir, "/usr/bin", "/bin"]),
                "HOME": str(self.folder), "TMPDIR": str(self.folder), "LANG": "C.UTF-8",
                "RAY_USAGE_STATS_ENABLED": "0", **self.ctx.cluster.process_labels()}

    def _log(self) -> str:
        with suppress(OSError):
            return (self.folder / "job.log").read_text(errors="replace")
        return ""


def ray_stop_said(output: str) -> tuple[int, list[dict]]:
    """What ``ray stop`` printed (``output``, colours removed): how many Ray processes it
    stopped, and each process it could not (``{"pid", "name"}``, once each; it tries one
    process under several of its patterns)."""
    stopped = next((int(a or b) for a, b in _STOPPED.findall(output)), 0)
    refused: dict[int, str] = {}
    for pid, name in _REFUSED.findall(output):
        refused.setdefault(int(pid), name)
    return stopped, [{"pid": pid, "name": name} for pid, name in refused.items()]


def _free_port() -> int:
    with closing(socket.socket()) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _uid(pid: int) -> int | None:
    try:
        return os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None


def _tail(text: str, lines: int = 8) -> str:
    return " | ".join(text.strip().splitlines()[-lines:]) or "(no output)"
