"""``rlsim doctor --ray-address`` with an address that is malformed, closed or not a Ray GCS: exit 2
with one line naming the address and the fix, within seconds; Ctrl-C and SIGTERM end it at once.

Every address is on loopback, served (or not) by this test.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import sys
from pathlib import Path

import loopback
import pytest
from loopback import SETTINGS_FRAME

from rlsim.doctor import gcs_silence, parse_address

RLSIM = [str(Path(sys.executable).parent / "rlsim")]


@pytest.mark.parametrize("text, expected", [
    ("127.0.0.1:6379", ("127.0.0.1", 6379)),
    ("head-0.cluster.local:1", ("head-0.cluster.local", 1)),
    ("[::1]:65535", ("::1", 65535)),
])
def test_host_port_addresses_parse(text, expected):
    assert parse_address(text) == expected


@pytest.mark.parametrize("text, words", [
    ("not-an-address", "is not HOST:PORT"),
    ("127.0.0.1", "is not HOST:PORT"),
    ("127.0.0.1:0", "outside 1-65535"),
    ("127.0.0.1:70000", "outside 1-65535"),
    ("ray://127.0.0.1:10001", "is not HOST:PORT"),
    ("a b:1", "is not HOST:PORT"),
    ("", "is not HOST:PORT"),
])
def test_malformed_addresses_are_refused_with_the_fix(text, words):
    with pytest.raises(ValueError) as e:
        parse_address(text)
    assert words in str(e.value) and "Fix: give the head's GCS address as HOST:PORT" in str(e.value)


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


_server = loopback.listener


def test_a_closed_port_is_named_at_once():
    assert "refused" in gcs_silence("127.0.0.1", _closed_port(), timeout_s=2).lower()


def test_a_port_that_never_answers_is_named_after_the_timeout():
    with _server(None) as (port, _):
        assert gcs_silence("127.0.0.1", port, timeout_s=0.2) == "no answer within 0.2 s"


def test_a_server_that_does_not_speak_grpc_is_not_a_gcs():
    with _server(b"HTTP/1.1 400 Bad Request\r\n\r\n") as (port, _):
        assert "not a Ray GCS" in gcs_silence("127.0.0.1", port, timeout_s=2)


def test_a_grpc_greeting_passes():
    with _server(SETTINGS_FRAME) as (port, _):
        assert gcs_silence("127.0.0.1", port, timeout_s=2) is None


def _doctor(address: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*RLSIM, "doctor", "--ray-address", address], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.parametrize("address, words", [
    ("not-an-address", "is not HOST:PORT"),
    ("127.0.0.1:70000", "outside 1-65535"),
])
def test_cli_refuses_a_malformed_address_without_a_traceback(address, words):
    out = _doctor(address)
    assert out.returncode == 2, out.stderr
    assert "Traceback" not in out.stderr and words in out.stderr
    assert out.stderr.count("\n") == 1 and out.stdout == ""


def test_cli_names_a_closed_port_and_ends_within_seconds():
    """It used to print only Ray's connection warnings for 95 s; 30 s is a generous bound."""
    address = f"127.0.0.1:{_closed_port()}"
    out = _doctor(address, timeout=30)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"rlsim doctor: no Ray cluster answers at {address}")
    assert "Fix:" in out.stderr and "Traceback" not in out.stderr
    assert out.stderr.count("\n") == 1


@pytest.mark.parametrize("answer", [None, SETTINGS_FRAME], ids=["silent", "greets-then-silent"])
def test_cli_names_a_gcs_that_takes_connections_but_never_answers(answer):
    """A listener that accepts and says nothing, or greets like gRPC and then answers no request
    (a GCS whose handlers are stuck): the second held Ray's own connect the doctor's whole 90 s,
    printing only Ray's warnings. A hang fails at the subprocess's 30 s."""
    with _server(answer) as (port, _):
        out = _doctor(f"127.0.0.1:{port}", timeout=30)
    assert out.returncode == 2, out.stderr
    assert out.stderr.startswith(f"rlsim doctor: no Ray cluster answers at 127.0.0.1:{port} ("), \
        out.stderr
    assert "Fix:" in out.stderr and out.stderr.count("\n") == 1, out.stderr


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_it_while_ray_is_connecting(sig):
    """The server greets like gRPC, so the doctor goes on to ask it a request, inside gRPC's C++
    (where Python's handlers never run, as in Ray's own connect) for up to 3 s: the signal must
    still end it."""
    with _server(SETTINGS_FRAME) as (port, connected):
        proc = subprocess.Popen([*RLSIM, "doctor", "--ray-address", f"127.0.0.1:{port}"],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            connected.wait(30)
            with contextlib.suppress(subprocess.TimeoutExpired):  # let the request begin
                proc.wait(0.5)
            assert proc.poll() is None, f"ended before the signal: {proc.stderr.read()}"
            proc.send_signal(sig)
            _, err = proc.communicate(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 128 + sig, err
    assert f"stopped by {sig.name} while connecting to the Ray cluster at 127.0.0.1:{port}" in err
