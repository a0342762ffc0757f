"""WebSockets as a budget: at most ``per_client`` open sockets per client address and ``total``
per API process, over every WebSocket route (``/ws/world``, ``/ws/feed``,
``/api/agents/telemetry``). A handshake past either bound is refused before the upgrade, with an
HTTP 429 ``{"error": "TOO_MANY_SOCKETS", "detail": ...}`` and ``Retry-After`` (the cheapest answer:
no socket is opened); a server without that ASGI extension accepts it only to send that body as
one frame and close with 1013 ("try again later").

An open socket costs the process a task, a bounded queue and its share of the frames sent; no
socket holds a Redis connection (api/fanout.py), so what bounds them is this count."""

from __future__ import annotations

import json
from collections import Counter

from prometheus_client import Counter as MetricCounter, Gauge
from starlette.types import ASGIApp, Receive, Scope, Send

TOO_MANY_SOCKETS = "TOO_MANY_SOCKETS"
CLOSE_TRY_AGAIN_LATER = 1013
RETRY_AFTER_S = "5"

OPEN_SOCKETS = Gauge("genesis_api_websockets_open", "WebSockets open on this API process")
REFUSED_SOCKETS = MetricCounter(
    "genesis_api_websockets_refused",
    "WebSockets refused by the socket budget, by bound (per_client or total)",
    ["bound"],
)


class SocketBudget:
    def __init__(self, app: ASGIApp, per_client: int, total: int) -> None:
        self.app = app
        self.per_client = per_client
        self.total = total
        self.open: Counter[str] = Counter()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "websocket":
            return await self.app(scope, receive, send)
        client = scope.get("client")
        address = str(client[0]) if client else "unknown"
        refusal = self._refusal(address)
        if refusal is not None:
            bound, detail = refusal
            REFUSED_SOCKETS.labels(bound).inc()
            return await _refuse(scope, receive, send, detail)
        self.open[address] += 1
        OPEN_SOCKETS.inc()
        try:
            await self.app(scope, receive, send)
        finally:
            OPEN_SOCKETS.dec()
            self.open[address] -= 1
            if self.open[address] <= 0:
                del self.open[address]

    def _refusal(self, address: str) -> tuple[str, str] | None:
        if self.open[address] >= self.per_client:
            return "per_client", (
                f"this address already has {self.per_client} WebSockets open on this server, the most one client "
                "may hold; close one (GENESIS_API_SOCKETS_PER_CLIENT sets the bound)"
            )
        if self.open.total() >= self.total:
            return "total", (
                f"this server already holds {self.total} WebSockets, the most it takes; try again later "
                "(GENESIS_API_SOCKETS_TOTAL sets the bound)"
            )
        return None


async def _refuse(scope: Scope, receive: Receive, send: Send, detail: str) -> None:
    if (await receive())["type"] != "websocket.connect":
        return
    body = json.dumps({"error": TOO_MANY_SOCKETS, "detail": detail}).encode()
    if "websocket.http.response" in scope.get("extensions", {}):
        headers = [(b"content-type", b"application/json"), (b"retry-after", RETRY_AFTER_S.encode())]
        await send({"type": "websocket.http.response.start", "status": 429, "headers": headers})
        await send({"type": "websocket.http.response.body", "body": body})
        return
    await send({"type": "websocket.accept"})
    await send({"type": "websocket.send", "text": body.decode()})
    await send({"type": "websocket.close", "code": CLOSE_TRY_AGAIN_LATER, "reason": TOO_MANY_SOCKETS})
