"""The GCS's external store for clusters with ``gcs_ft: redis`` (Ray's GCS fault tolerance).

A real ``redis-server`` per cluster, started before the head and stopped with the cluster: at the
slot's ``.9`` address and the port block's ``base + 5`` (see :mod:`rlsim.host.layout`), password
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


def _password_path(st: ClusterState):
    return st.root / "gcs-store.password"


def start(st: ClusterState) -> int:
    """Start the cluster's Redis and wait until it answers; its pid."""
    host, port = st.layout.gcs_store_address.rsplit(":", 1)
    password = secrets.token_hex(16)
    path = _password_path(st)
    path.touch(0o600)
    write_file(path, password, 0o600)
    log = st.root / "gcs-store.log"
    cmd = ["redis-server", "--bind", host, "--port", port, "--requirepass", password,
           "--save", "", "--appendonly", "no", "--dir", str(st.root), "--logfile", str(log),
           "--daemonize", "no", "--set-proc-title", "no"]  # keeps the session label
    env = {**os.environ, **procs.labels(st.session)}
    proc = subprocess.Popen(cmd, env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    deadline = time.monotonic() + START_TIMEOUT_S
    while not _answers(host, int(port), password):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            tail = log.read_text()[-600:] if log.exists() else ""
            raise RuntimeError(f"the GCS store (redis-server at {host}:{port}) did not answer "
                               f"within {START_TIMEOUT_S:.0f} s (exit {proc.poll()}). Log tail:\n"
                               f"{tail}")
        time.sleep(0.05)
    return proc.pid


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
    address = st.layout.gcs_store_address
    return {"external_addresses": [address, address], "num_redis_shards": 1,
            "redis_password": read_file(_password_path(st)).decode()}
