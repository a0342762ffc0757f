"""The telemetry stream's hub: one Redis subscription per API process, fanned out to every
``WS /api/agents/telemetry`` socket (open-mutation-api.md, block 3).

- **One subscription.** The hub holds one pub/sub connection on ``ch:telemetry``,
  ``ch:agent:tasks``, ``ch:mutation:applied`` and ``ch:mutation:rollback``, turns each message into
  an event once (a ``ch:telemetry`` message names a snapshot key: it is resolved to the
  ``WorldSnapshot`` here, one HGETALL for all clients), serialises it once and offers the text to
  every socket whose filter wants it.
- **Slow clients never hold the others up.** The hub never awaits a client: each socket has a
  bounded queue (``GENESIS_TELEMETRY_CLIENT_QUEUE``) and its own sender task. A client whose queue
  is full is *disconnected* (close code 1013 "try again later", reason ``SLOW_CONSUMER``): events
  are discrete facts (a task, an activation), so silently dropping some would leave an agent
  believing something false; a closed socket tells it to reconnect and resync over REST.
- **Redis restarts.** Any error on the subscription (Redis restarted, connection killed, network)
  closes it and the hub reconnects with capped exponential backoff and jitter
  (``GENESIS_TELEMETRY_RECONNECT_MAX_S``), re-subscribing every channel. Sockets stay open
  meanwhile; events published while Redis was unreachable are lost (pub/sub keeps nothing).
  The connection is named ``genesis-telemetry:<pid>`` (``CLIENT LIST``).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

from genesis.redis_keys import Channels, world_snapshot

log = logging.getLogger("genesis.telemetry")

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

CLOSE_SLOW_CONSUMER = 1013  # "try again later"
SLOW_CONSUMER = "SLOW_CONSUMER"


def _text(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def snapshot_event(raw: dict) -> dict[str, Any] | None:
    """The ``WorldSnapshot`` event of a ``ws:snapshot:{tick}`` hash (string values), or None."""
    values = {_text(k): _text(v) for k, v in raw.items()}
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


@dataclass(eq=False)
class Subscriber:
    """One socket's view of the hub: the events it wants and its bounded queue."""

    events: frozenset[str]
    queue: asyncio.Queue
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, text: str) -> bool:
        if self.overflowed.is_set():
            return False
        try:
            self.queue.put_nowait(text)
            return True
        except asyncio.QueueFull:
            self.overflowed.set()  # its socket handler closes it with SLOW_CONSUMER
            return False


class TelemetryHub:
    def __init__(self, redis_url: str, redis: aioredis.Redis, *, queue_size: int, reconnect_max_s: float):
        self._redis_url = redis_url
        self._redis = redis  # resolves snapshot keys
        self._queue_size = queue_size
        self._reconnect_max_s = reconnect_max_s
        self._subscribers: set[Subscriber] = set()
        self._task: asyncio.Task | None = None
        self._closing = False
        self.client_name = f"genesis-telemetry:{os.getpid()}"
        self.subscribed = False
        self.counters = {
            "connects": 0,
            "connection_errors": 0,
            "events": 0,
            "ignored": 0,
            "delivered": 0,
            "slow_consumers_closed": 0,
        }
        self.last_error: str | None = None

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="telemetry-hub")

    async def close(self) -> None:
        """Stop the subscription. redis-py's ``get_message`` can swallow a cancellation (the loop
        then goes on reading): the loop also checks ``_closing``, and the cancel is repeated."""
        self._closing = True
        if self._task is not None:
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=0.5)
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def subscribe(self, events: frozenset[str]) -> Subscriber:
        subscriber = Subscriber(events=events, queue=asyncio.Queue(maxsize=self._queue_size))
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def status(self) -> dict[str, Any]:
        return {
            "subscribed": self.subscribed,
            "channels": list(CHANNELS),
            "clients": len(self._subscribers),
            "client_queue": self._queue_size,
            "connection_name": self.client_name,
            "last_error": self.last_error,
            **self.counters,
        }

    # -- the subscription -------------------------------------------------------------------
    async def _run(self) -> None:
        delay = 0.1
        while not self._closing:
            client = aioredis.from_url(
                self._redis_url,
                client_name=self.client_name,
                socket_connect_timeout=2,
                socket_keepalive=True,
                health_check_interval=15,
                retry=Retry(NoBackoff(), 0),  # errors come to this loop: one reconnect path
            )
            pubsub = client.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(*CHANNELS)
                self.subscribed = True
                self.counters["connects"] += 1
                if self.counters["connects"] > 1:
                    log.info("telemetry: resubscribed to Redis (%s)", ", ".join(CHANNELS))
                delay = 0.1
                while not self._closing:
                    message = await pubsub.get_message(timeout=5.0)
                    if message is not None and message.get("type") == "message":
                        await self._dispatch(_text(message["channel"]), message["data"])
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis restarted, connection killed, network: start over
                self.counters["connection_errors"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("telemetry: Redis subscription lost (%s); reconnecting in %.1fs", self.last_error, delay)
            finally:
                self.subscribed = False
                for closing in (pubsub.aclose(), client.aclose()):
                    try:
                        await asyncio.wait_for(closing, 2)
                    except BaseException:  # noqa: BLE001 - a dead connection may fail to close
                        pass
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._reconnect_max_s)

    async def _dispatch(self, channel: str, data: Any) -> None:
        event = await self._event_of(channel, data)
        if event is None:
            self.counters["ignored"] += 1
            return
        self.counters["events"] += 1
        kind = event["event"]
        text = json.dumps(event, separators=(",", ":"))
        for subscriber in list(self._subscribers):
            if kind in subscriber.events and subscriber.offer(text):
                self.counters["delivered"] += 1

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
