"""A webhook receiver on loopback that records what Genesis sends it, for tests of notify_url."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from cli.processes import free_port


class Receiver:
    """A real HTTP server on loopback that records every POST (headers, raw body)."""

    def __init__(self, port: int | None = None, status: int = 200):
        self.port = port or free_port()
        self.status = status
        self.calls: list[tuple[dict[str, str], bytes]] = []
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
                receiver.calls.append(({k.lower(): v for k, v in self.headers.items()}, body))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/hooks/genesis"

    def events(self, mutation_id: str) -> list[dict]:
        return [json.loads(body) for _, body in self.calls if json.loads(body)["mutation_id"] == mutation_id]

    async def wait_for(self, mutation_id: str, status: str, timeout_s: float = 60) -> list[dict]:
        deadline = time.monotonic() + timeout_s
        while not any(e["status"] == status for e in self.events(mutation_id)):
            assert time.monotonic() < deadline, f"no {status} callback for {mutation_id}: {self.events(mutation_id)}"
            await asyncio.sleep(0.1)
        return self.events(mutation_id)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
