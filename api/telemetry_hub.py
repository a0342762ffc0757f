"""The telemetry stream's hub: one Redis subscription per API process, fanned out to every
``WS /api/agents/telemetry`` socket (open-mutation-api.md, block 3).

- **One subscription.** The hub holds one pub/sub connection on ``ch:telemetry``,
  ``ch:agent:tasks``, ``ch:mutation:applied`` and ``ch:mutation:rollback``, turns each message into
  an event once (a ``ch:telemetry`` message names a snapshot key: it is resolved to the
  ``WorldSnapshot`` here, one HGETALL for all clients), serialises it once and offers the text to
  every socket whose filter wants it.
- **Slow clients and Redis restarts** as every hub handles them (api/fanout.py): each socket's
  queue holds ``GENESIS_TELEMETRY_CLIENT_QUEUE`` events, a client that falls further behind is
  closed with 1013 ``SLOW_CONSUMER`` (reconnect and resync over REST); events published while
  Redis was unreachable are lost (pub/sub keeps nothing). The connection is named
  ``genesis-telemetry:<pid>`` (``CLIENT LIST``).
"""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis

from api.fanout import Hub, text_of
from genesis.redis_keys import Channels, world_snapshot

SEED_EVENTS = ("WorldSnapshot", "TaskPublished", "TaskExpired", "MutationActivated", "MutationRolledBack")
# Also forwarded from ch:agent:tasks: a task that ended other than by expiry (claimed mutation
# activated, problem resolved).
EVENT_TYPES = (*SEED_EVENTS, "TaskClosed")
CHANNELS = (Channels.TELEMETRY, Channels.AGENT_TASKS, Channels.MUTATION_APPLIED, Channels.MUTATION_ROLLBACK)
# Which events each channel may carry; anything else on it is ignored (and counted).
_CHANNEL_EVENTS = {
    Channels.AGENT_TASKS: {"TaskPublished", "TaskExpired", "TaskClosed"},
    Channels.MUTATION_APPLIED: {"MutationActivated"},
    Channels.MUTATION_ROLLBACK: {"MutationRolledBack"},
}

# WorldSnapshot fields sent on the stream (the seed's snapshot of logic-flow.md, typed), in order.
_SNAPSHOT_INT = (
    "tick",
    "entity_count",
    "births_last_period",
    "deaths_last_period",
    "death_starvation",
    "death_age",
    "death_collision",
    "trait_diversity",
    "resource_count",
)
_SNAPSHOT_FLOAT = ("timestamp", "avg_energy", "resource_density", "temperature")
_SNAPSHOT_STR = ("dominant_trait", "run_id")
_SNAPSHOT_JSON = ("trait_usage",)


def snapshot_event(raw: dict) -> dict[str, Any] | None:
    """The ``WorldSnapshot`` event of a ``ws:snapshot:{tick}`` hash (string values), or None."""
    values = {text_of(k): text_of(v) for k, v in raw.items()}
    if "tick" not in values:
        return None
    event: dict[str, Any] = {"event": "WorldSnapshot"}
    try:
        for name in _SNAPSHOT_INT:
            if name in values:
                event[name] = int(values[name])
        for name in _SNAPSHOT_FLOAT:
            if name in values:
                event[name] = float(values[name])
        for name in _SNAPSHOT_STR:
            if name in values:
                event[name] = values[name]
        for name in _SNAPSHOT_JSON:
            if name in values:
                event[name] = json.loads(values[name] or "null")
    except ValueError:
        return None
    return event


class TelemetryHub(Hub):
    label = "telemetry"

    def __init__(self, redis_url: str, redis: aioredis.Redis, *, queue_size: int, reconnect_max_s: float):
        super().__init__(redis_url, queue_size=queue_size, reconnect_max_s=reconnect_max_s)
        self._redis = redis  # resolves snapshot keys

    def status(self) -> dict[str, Any]:
        return {**super().status(), "channels": list(CHANNELS)}

    async def _follow(self, client: aioredis.Redis) -> None:
        await self._follow_channels(client, CHANNELS)

    async def _on_message(self, channel: str, data: Any) -> None:
        event = await self._event_of(channel, data)
        if event is None:
            self.counters["ignored"] += 1
            return
        self._deliver(json.dumps(event, separators=(",", ":")), event["event"])

    async def _event_of(self, channel: str, data: Any) -> dict[str, Any] | None:
        try:
            payload = json.loads(data)
        except (ValueError, TypeError):
            return None
        if not isinstance(payload, dict):
            return None
        if channel == Channels.TELEMETRY:
            tick = payload.get("tick")
            if not isinstance(tick, int) or payload.get("snapshot_key", world_snapshot(tick)) != world_snapshot(tick):
                return None
            # A snapshot published by an engine on another Redis database (pub/sub is server-wide)
            # or already expired has no hash here: nothing to send.
            return snapshot_event(await self._redis.hgetall(world_snapshot(tick)))
        if payload.get("event") in _CHANNEL_EVENTS.get(channel, ()):
            return payload
        return None
