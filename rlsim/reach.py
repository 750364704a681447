"""Does a Ray cluster answer at an address, and does it take this process's token? Asked in a
second, before Ray's own connect, which retries an address nobody serves for minutes and a refused
token for about 20 s, deep in C++, printing only warnings. The trainer's driver and rlsim's
doctor, real backend, planner and launchers all ask this way. This module needs only the standard
library; whether the GCS takes this process's token is asked through Ray's own gRPC and token
loader (:func:`rlsim.backends.ray_internals.gcs.refusal`)."""

from __future__ import annotations

import os
import re
import socket

GCS_ANSWER_TIMEOUT_S = 3.0  # a GCS that is up answers a connection in milliseconds
ADDRESS_RE = re.compile(r"^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9_.-]+)):(\d{1,5})$")
# what a gRPC server (Ray's GCS is one) sends first: an HTTP/2 SETTINGS frame
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2_SETTINGS = 0x4


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``[IPv6]:PORT``) of a GCS -> (host, port); :class:`ValueError` saying
    what is wrong and the fix otherwise."""
    m = ADDRESS_RE.match(text.strip())
    fix = "Fix: give the head's GCS address as HOST:PORT, e.g. --ray-address 10.0.0.1:6379"
    if not m:
        raise ValueError(f"--ray-address {text!r} is not HOST:PORT. {fix}")
    port = int(m.group(3))
    if not 1 <= port <= 65535:
        raise ValueError(f"--ray-address {text!r}: port {port} is outside 1-65535. {fix}")
    return m.group(1) or m.group(2), port


def gcs_silence(host: str, port: int, timeout_s: float = GCS_ANSWER_TIMEOUT_S) -> str | None:
    """None if a gRPC server answers at ``host:port`` within ``timeout_s``, else what happened.

    Ray's own connection to an address nobody serves retries for minutes, deep in C++, printing
    only its warnings; asking first answers in seconds. With TLS on (``RAY_USE_TLS``) only the TCP
    connection is checked: the plain HTTP/2 greeting would not be understood.
    """
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as sock:
            if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
                return None
            sock.settimeout(timeout_s)
            sock.sendall(H2_PREFACE)
            head = sock.recv(9)
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except OSError as e:
        return e.strerror or str(e) or type(e).__name__
    if len(head) < 4 or head[3] != H2_SETTINGS:
        return "something answers there, but not a Ray GCS (it does not speak gRPC)"
    return None
