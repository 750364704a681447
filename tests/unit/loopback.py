"""A loopback listener standing for a GCS that takes connections and then says nothing useful:
it accepts every connection, writes ``answer`` (None: nothing) and never says anything more."""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator

# what a gRPC server sends first: an empty HTTP/2 SETTINGS frame
SETTINGS_FRAME = b"\x00\x00\x00\x04\x00\x00\x00\x00\x00"


@contextlib.contextmanager
def listener(answer: bytes | None) -> Iterator[tuple[int, threading.Event]]:
    """Yields the listener's port and an event set at its first connection."""
    lsock = socket.create_server(("127.0.0.1", 0))
    connected = threading.Event()
    held: list[socket.socket] = []

    def serve() -> None:
        with contextlib.suppress(OSError):
            while True:
                conn, _ = lsock.accept()
                held.append(conn)
                connected.set()
                if answer is not None:
                    conn.sendall(answer)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield lsock.getsockname()[1], connected
    finally:
        lsock.close()
        for conn in held:
            conn.close()
