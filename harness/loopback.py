"""Loopback ports for the processes the demo, the tests and the benches start, and a server
that never answers (the hanging service of the text path's failure tests and bench)."""

from __future__ import annotations

import socket
import threading


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now (the caller binds it soon after)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class SilentServer:
    """Accepts connections on 127.0.0.1 and never answers: a service that hangs (a call to it
    can only time out)."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(256)
        self.port = self.sock.getsockname()[1]
        self.conns: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.conns.append(conn)

    def close(self) -> None:
        self.closed = True
        self.sock.close()
        for c in self.conns:
            c.close()
