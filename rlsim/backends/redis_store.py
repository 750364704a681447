"""The GCS's external store for clusters with ``gcs_ft: redis`` (Ray's GCS fault tolerance).

A real ``redis-server`` per cluster, started before the head and stopped with the cluster: at the
slot's ``.9`` address on one machine (a substrate's: its head machine's address), on the port
block's ``base + 5`` (see :mod:`rlsim.host.layout`), recorded as the state's ``gcs_store``, password
protected (a fresh password in the cluster's private run directory), no persistence (it stands
for an HA Redis that outlives the head, not for one that survives its own crash). It carries the
cluster's session label, so a reaper that finds the cluster abandoned kills it with the nodes.
The head is started with it as its external store (``external_addresses`` and
``redis_password``, what ``RAY_REDIS_ADDRESS`` and ``--redis-password`` set for ``ray start``),
so a head restarted at its address reloads the cluster's tables from it.
"""

from __future__ import annotations

import os
import secrets
import shutil
import socket
import subprocess
import time

from rlsim.files import read_file, write_file
from rlsim.host import procs
from rlsim.host.state import ClusterState

START_TIMEOUT_S = 10.0


def problem() -> str | None:
    """Why this machine cannot run a cluster's Redis, or None."""
    if shutil.which("redis-server") is None:
        return "redis-server is not installed (Debian: apt-get install redis-server; ci/setup.sh)"
    return None


def password_path(st: ClusterState):
    return st.root / "gcs-store.password"


def start(st: ClusterState) -> int:
    """Start the cluster's Redis here, at the slot's store address, and wait until it answers;
    its pid."""
    argv, env = prepare(st, st.layout.gcs_store_address)
    proc = subprocess.Popen(argv, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                            start_new_session=True)
    try:
        wait(st, proc.poll)
    except RuntimeError:
        proc.kill()
        raise
    return proc.pid


def prepare(st: ClusterState, address: str) -> tuple[list[str], dict[str, str]]:
    """The cluster's Redis at ``address`` (HOST:PORT, recorded as ``st.gcs_store``): its command
    line and the environment it adds (the session label); a fresh password written first."""
    st.gcs_store = address
    host, port = address.rsplit(":", 1)
    path = password_path(st)
    path.touch(0o600)
    write_file(path, secrets.token_hex(16), 0o600)
    cmd = ["redis-server", "--bind", host, "--port", port, "--requirepass", password(st),
           "--save", "", "--appendonly", "no", "--dir", str(st.root), "--logfile",
           str(_log_path(st)), "--daemonize", "no", "--set-proc-title", "no"]  # keeps the label
    return cmd, procs.labels(st.session)


def wait(st: ClusterState, exited) -> None:
    """Until the cluster's Redis answers; RuntimeError (with its log's tail where it is on this
    machine) if ``exited()`` (its exit status, None while it runs) says it ended, or it does not
    answer within ``START_TIMEOUT_S``."""
    host, port = st.gcs_store.rsplit(":", 1)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(host, int(port), password(st)):
        if (code := exited()) is not None or time.monotonic() > deadline:
            log = _log_path(st)
            tail = log.read_text()[-600:] if log.exists() else f"(none at {log} here)"
            raise RuntimeError(f"the GCS store (redis-server at {st.gcs_store}) did not answer "
                               f"within {START_TIMEOUT_S:.0f} s (exit {code}). Log tail:\n{tail}")
        time.sleep(0.05)


def password(st: ClusterState) -> str:
    return read_file(password_path(st)).decode()


def _log_path(st: ClusterState):
    return st.root / "gcs-store.log"


def _answers(host: str, port: int, password: str) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1) as s:
            s.sendall(f"AUTH {password}\r\nPING\r\n".encode())
            got = b""
            while b"PONG" not in got and len(got) < 200:
                chunk = s.recv(200)
                if not chunk:
                    break
                got += chunk
            return b"+OK" in got and b"+PONG" in got
    except OSError:
        return False


def head_params(st: ClusterState) -> dict:
    """What the head's Ray parameters add to use the store (none without ``gcs_ft``)."""
    if st.spec.gcs_ft != "redis":
        return {}
    address = st.gcs_store
    return {"external_addresses": [address, address], "num_redis_shards": 1,
            "redis_password": password(st)}
