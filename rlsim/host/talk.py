"""A conversation with a process, one JSON line per question and per answer (the doctor's probe,
:mod:`rlsim.doctor.probe`): started at the first question, ended by :meth:`Talk.close`. A process
that exits, or gives no answer in time, is a failure said in words, and is not asked again."""

from __future__ import annotations

import contextlib
import json
import select
import subprocess


class Talk:
    def __init__(self, argv: list[str], timeout_s: float, env: dict[str, str] | None = None):
        self.argv, self.timeout_s, self.env = argv, timeout_s, env
        self._proc: subprocess.Popen | None = None
        self._failed: str | None = None

    def ask(self, phase: str, args: dict) -> dict:
        """The process's answer to ``{"phase", "args"}``; RuntimeError saying why none came."""
        if self._failed:
            raise RuntimeError(self._failed)
        if self._proc is None:
            self._proc = subprocess.Popen(self.argv, stdin=subprocess.PIPE,
                                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                          text=True, env=self.env)
        proc = self._proc
        with contextlib.suppress(OSError):  # it ended: its status and stderr say why
            proc.stdin.write(json.dumps({"phase": phase, "args": args}) + "\n")
            proc.stdin.flush()
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout_s)
        line = proc.stdout.readline() if ready else ""
        if line.strip():
            return json.loads(line)
        if ready:
            proc.wait(timeout=5)
            said = proc.stderr.read().strip()[-300:]
            self._failed = f"probe exited {proc.returncode}: {said}"
        else:
            self._failed = f"probe gave no answer to {phase} within {self.timeout_s:g} s"
        raise RuntimeError(self._failed)

    def close(self) -> None:
        """End the process (its stdin closed; killed after 5 s). Safe twice."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(OSError):
            proc.stdin.close()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
