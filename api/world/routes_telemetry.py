"""WS /api/agents/telemetry: world snapshots, tasks and mutation events without polling
(open-mutation-api.md, block 3). The hub (api/telemetry_hub.py) holds the one Redis
subscription of this process; each socket gets the events its filter wants."""

from __future__ import annotations

import json

from fastapi import APIRouter, WebSocket

from api.deps import TelemetryHubDep
from api.fanout import pump
from api.telemetry_hub import EVENT_TYPES

router = APIRouter(tags=["telemetry"])

CLOSE_POLICY_VIOLATION = 1008
INVALID_EVENT_FILTER = "INVALID_EVENT_FILTER"


def parse_filter(raw: str | None) -> frozenset[str]:
    """``?events=WorldSnapshot,TaskPublished`` → those events; absent → all. ValueError names
    what is wrong."""
    if raw is None:
        return frozenset(EVENT_TYPES)
    names = [name.strip() for name in raw.split(",")]
    if not any(names):
        raise ValueError(
            f"events is empty: name one or more of {', '.join(EVENT_TYPES)} (comma-separated), "
            "or leave the parameter out for all"
        )
    unknown = sorted({name for name in names if name not in EVENT_TYPES})
    if unknown:
        raise ValueError(f"unknown event type(s) {', '.join(map(repr, unknown))}: choose from {', '.join(EVENT_TYPES)}")
    return frozenset(names)


@router.websocket("/api/agents/telemetry")
async def telemetry(websocket: WebSocket, hub: TelemetryHubDep, events: str | None = None) -> None:
    """One JSON event per text frame: ``WorldSnapshot``, ``TaskPublished``, ``TaskExpired``,
    ``TaskClosed``, ``MutationActivated``, ``MutationRolledBack``. ``?events=A,B`` limits the
    stream to those types; an invalid filter gets an error frame and close code 1008.
    A client that falls ``GENESIS_TELEMETRY_CLIENT_QUEUE`` events behind is closed with 1013
    (reason ``SLOW_CONSUMER``). Redis outages pause the stream without closing it."""
    try:
        wanted = parse_filter(events)
    except ValueError as exc:
        await websocket.accept()
        await websocket.send_text(json.dumps({"event": "Error", "error": INVALID_EVENT_FILTER, "detail": str(exc)}))
        await websocket.close(code=CLOSE_POLICY_VIOLATION, reason=INVALID_EVENT_FILTER)
        return
    subscriber = hub.subscribe(wanted)  # before the handshake completes: nothing after it is missed
    try:
        await websocket.accept()
    except Exception:
        hub.unsubscribe(subscriber)
        raise
    await pump(websocket, hub, subscriber)


@router.get("/api/agents/telemetry/status")
async def telemetry_status(hub: TelemetryHubDep) -> dict:
    """This API process's telemetry hub: whether its Redis subscription is up, connected
    clients, (re)connects, events forwarded and slow clients closed."""
    return hub.status()
