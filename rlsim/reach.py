"""Does a Ray cluster answer at an address, and does it take this process's token? Asked in a
second, before Ray's own connect, which retries an address nobody serves for minutes and a refused
token for about 20 s, deep in C++, printing only warnings. The trainer's driver and rlsim's
doctor, real backend, planner and launchers all ask this way. :func:`gcs_silence` needs only the
standard library; :func:`gcs_refusal` needs Ray (its gRPC and its token loader)."""

from __future__ import annotations

import os
import re
import socket

GCS_ANSWER_TIMEOUT_S = 3.0  # a GCS that is up answers a connection in milliseconds
ADDRESS_RE = re.compile(r"^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9_.-]+)):(\d{1,5})$")
# what a gRPC server (Ray's GCS is one) sends first: an HTTP/2 SETTINGS frame
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2_SETTINGS = 0x4
# a GCS method every Ray release here serves, with an empty request: the cheapest question that
# passes the GCS's token check
GCS_PROBE_METHOD = "/ray.rpc.NodeInfoGcsService/GetClusterId"


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


def gcs_refusal(host: str, port: int, timeout_s: float = GCS_ANSWER_TIMEOUT_S) -> str | None:
    """The GCS's words if it refuses the token this process would present (Ray's own settings:
    RAY_AUTH_MODE, RAY_AUTH_TOKEN_PATH or RAY_AUTH_TOKEN, read when Ray was imported), else None:
    accepted, or not known (no Ray here, TLS on, any other error: Ray's own connect then says).

    A cluster with token auth refuses a driver without the token; Ray's connect then retries for
    about 20 s, printing a warning a second, before it fails. One call answers in milliseconds.
    """
    if os.environ.get("RAY_USE_TLS", "0").lower() in ("1", "true"):
        return None
    try:
        import grpc
        from ray._private.authentication.grpc_authentication_client_interceptor import (
            _get_authentication_metadata_tuple,
        )

        metadata = _get_authentication_metadata_tuple()
    except Exception:  # noqa: BLE001 - no Ray, or a token setting it cannot read: Ray will say
        return None
    channel = grpc.insecure_channel(f"[{host}]:{port}" if ":" in host else f"{host}:{port}",
                                    options=[("grpc.enable_http_proxy", 0)])  # as Ray's own
    try:
        channel.unary_unary(GCS_PROBE_METHOD, request_serializer=bytes,
                            response_deserializer=bytes)(b"", timeout=timeout_s,
                                                         metadata=metadata)
    except grpc.RpcError as e:
        if e.code() == grpc.StatusCode.UNAUTHENTICATED:
            return e.details() or "unauthenticated"
    finally:
        channel.close()
    return None
