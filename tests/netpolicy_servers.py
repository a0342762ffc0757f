"""Servers on loopback that misbehave on purpose, for tests of outbound connections."""

from __future__ import annotations

import contextlib
import socket
import threading


class Silent:
    """A TCP server that accepts connections and never says a word."""

    def __init__(self, port: int = 0):
        self.socket = socket.create_server(("127.0.0.1", port))
        self.port = self.socket.getsockname()[1]
        self.connections: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                self.connections.append(self.socket.accept()[0])
            except OSError:
                return

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.socket.shutdown(socket.SHUT_RDWR)  # wakes the accepting thread: the port is free at once
        self.socket.close()
        for connection in self.connections:
            connection.close()
