"""Does a Ray cluster answer at an address, and does it take this process's token? Asked in a
second, before Ray's own connect, which retries an address nobody serves for minutes and a refused
token for about 20 s, deep in C++, printing only warnings. This module needs only the standard
library; whoever hands an address to Ray's own connect asks
:func:`rlsim.ray_internals.gcs.no_answer`, which begins with :func:`gcs_silence` here
and then sends one request, since a GCS that greets and answers nothing passes a greeting.
Whether the GCS takes this process's token is asked through Ray's own gRPC and token loader
(:func:`rlsim.ray_internals.gcs.refusal`)."""

from __future__ import annotations

import ipaddress
import os
import re
import socket

GCS_ANSWER_TIMEOUT_S = 3.0  # a GCS that is up answers a connection in milliseconds
ADDRESS_RE = re.compile(r"^(?:\[([0-9a-fA-F:.]+)\]|([A-Za-z0-9_.-]+)):(\d{1,5})$", re.ASCII)
# what a gRPC server (Ray's GCS is one) sends first: an HTTP/2 SETTINGS frame
H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"
H2_SETTINGS = 0x4


def parse_address(text: str, option: str = "--ray-address") -> tuple[str, int]:
    """``HOST:PORT`` (or ``[IPv6]:PORT``) of a GCS -> (host, port); :class:`ValueError` naming
    ``option`` (where the address was given), what is wrong and the fix otherwise."""
    if problem := address_problem(text.strip()):
        raise ValueError(f"{option} {problem}. Fix: give the head's GCS address as HOST:PORT, "
                         f"e.g. {option} 10.0.0.1:6379")
    m = ADDRESS_RE.match(text.strip())
    return m.group(1) or m.group(2), int(m.group(3))


def address_problem(text: str) -> str | None:
    """What keeps ``text`` from being a GCS's ``HOST:PORT`` (the text quoted first), or None.
    A host name is dot-separated labels of 1-63 characters (``...`` or ``a..b`` would reach the
    resolver, which raises UnicodeError on an empty label); an IPv6 host is bracketed."""
    m = ADDRESS_RE.fullmatch(text) if isinstance(text, str) else None  # no newline after
    if not m:
        return f"{str(text)[:200]!r} is not HOST:PORT"
    port = int(m.group(3))
    if not 1 <= port <= 65535:
        return f"{text!r}: port {port} is outside 1-65535"
    if m.group(1) is not None:
        try:
            ipaddress.IPv6Address(m.group(1))
        except ValueError:
            return f"{text!r}: [{m.group(1)}] is not an IPv6 address"
    elif len(m.group(2)) > 253 or not all(0 < len(label) <= 63
                                          for label in m.group(2).removesuffix(".").split(".")):
        return f"{text!r}: {m.group(2)!r} is not a host name (labels of 1-63 characters " \
            "between dots)"
    return None


def substrate_problem(text: str) -> str | None:
    """What keeps ``text`` from being a substrate's GCS address (``cluster.on``, ``rlsim cluster
    --on``), or None: :func:`address_problem`, and a bracketed IPv6 host, which a substrate's
    connection (``ray_state._listens``, Ray's own ``address``) reads as a host name that never
    resolves."""
    if found := address_problem(text):
        return found
    if text.startswith("["):
        return f"{text!r}: an IPv6 host, which rlsim's connection to a substrate does not " \
            "take (name its head by host name or IPv4)"
    return None


def gcs_silence(host: str, port: int, timeout_s: float = GCS_ANSWER_TIMEOUT_S) -> str | None:
    """None if a gRPC server greets at ``host:port`` within ``timeout_s``, else what happened.
    A greeting alone: a server that greets and then answers no request passes (front ends ask
    :func:`rlsim.ray_internals.gcs.no_answer`, which asks both).

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
