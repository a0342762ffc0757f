"""One Redis reader per API process, fanned out in memory to every socket that streams from it.

A WebSocket never holds a Redis connection of its own: each stream (telemetry, world frames, the
feed) has one hub per process, reading on a dedicated connection, and every socket gets a
``Subscriber`` of that hub. So a thousand sockets cost the request path's Redis pool nothing.

- **Slow clients never hold the others up.** A hub never awaits a client: it offers each text to
  every subscriber's bounded queue. A ``latest_only`` subscriber (viewer frames, where only the
  newest matters) keeps just the newest text; any other whose queue is full is marked
  *overflowed* and its socket is closed with 1013 ``SLOW_CONSUMER`` (its events are discrete
  facts: dropping some silently would leave the client believing something false). A send the
  client does not take within ``SEND_TIMEOUT_S`` closes the socket the same way, so nothing is
  buffered for a reader that stopped reading.
- **Redis restarts.** Any error on the hub's connection closes it; the hub reconnects with
  capped exponential backoff and jitter and goes on. Sockets stay open meanwhile.
"""

from __future__ import annotations

import abc
import asyncio
import logging
import os
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff
from starlette.websockets import WebSocket, WebSocketDisconnect, WebSocketState

log = logging.getLogger("genesis.streams")

CLOSE_SLOW_CONSUMER = 1013  # "try again later"
SLOW_CONSUMER = "SLOW_CONSUMER"
SEND_TIMEOUT_S = 10.0  # a client that takes no frame for this long is closed as a slow consumer
CLOSE_WAIT_S = 10.0


def text_of(value: Any) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


@dataclass(eq=False)
class Subscriber:
    """One socket's view of a hub: the kinds it wants (None: all) and its bounded queue."""

    queue: asyncio.Queue
    kinds: frozenset[str] | None = None
    latest_only: bool = False
    overflowed: asyncio.Event = field(default_factory=asyncio.Event)

    def offer(self, text: str, kind: str | None = None) -> bool:
        if self.overflowed.is_set() or (self.kinds is not None and kind not in self.kinds):
            return False
        if self.latest_only and self.queue.full():
            self.queue.get_nowait()  # an older frame nobody has sent yet: the newer replaces it
        try:
            self.queue.put_nowait(text)
            return True
        except asyncio.QueueFull:
            self.overflowed.set()  # its socket's pump closes it with SLOW_CONSUMER
            return False


class Hub(abc.ABC):
    """The reconnecting reader and the subscribers of one stream (see the module doc)."""

    label = "stream"

    def __init__(self, redis_url: str, *, queue_size: int, reconnect_max_s: float) -> None:
        self._redis_url = redis_url
        self._queue_size = queue_size
        self._reconnect_max_s = reconnect_max_s
        self._subscribers: set[Subscriber] = set()
        self._task: asyncio.Task | None = None
        self._closing = False
        self.client_name = f"genesis-{self.label}:{os.getpid()}"
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

    @abc.abstractmethod
    async def _follow(self, client: aioredis.Redis) -> None:
        """Read the stream on ``client`` and ``_deliver`` what comes until ``_closing`` (or an
        error: the caller reconnects)."""

    # -- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"{self.label}-hub")

    async def close(self) -> None:
        """Stop reading. redis-py's ``get_message`` can swallow a cancellation (the loop then goes
        on reading): the loop also checks ``_closing``, and the cancel is repeated."""
        self._closing = True
        if self._task is not None:
            while not self._task.done():
                self._task.cancel()
                await asyncio.wait({self._task}, timeout=0.5)
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    def subscribe(self, kinds: frozenset[str] | None = None, *, latest_only: bool = False) -> Subscriber:
        queue: asyncio.Queue = asyncio.Queue(maxsize=1 if latest_only else self._queue_size)
        subscriber = Subscriber(queue=queue, kinds=kinds, latest_only=latest_only)
        self._subscribers.add(subscriber)
        return subscriber

    def unsubscribe(self, subscriber: Subscriber) -> None:
        self._subscribers.discard(subscriber)

    def status(self) -> dict[str, Any]:
        return {
            "subscribed": self.subscribed,
            "clients": len(self._subscribers),
            "client_queue": self._queue_size,
            "connection_name": self.client_name,
            "last_error": self.last_error,
            **self.counters,
        }

    def _deliver(self, text: str, kind: str | None = None) -> None:
        self.counters["events"] += 1
        for subscriber in list(self._subscribers):
            if subscriber.offer(text, kind):
                self.counters["delivered"] += 1

    # -- the connection ---------------------------------------------------------------------
    async def _run(self) -> None:
        delay = 0.1
        while not self._closing:
            connects_before = self.counters["connects"]
            client = aioredis.from_url(
                self._redis_url,
                client_name=self.client_name,
                socket_connect_timeout=2,
                socket_keepalive=True,
                health_check_interval=15,
                retry=Retry(NoBackoff(), 0),  # errors come to this loop: one reconnect path
            )
            try:
                await self._follow(client)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # Redis restarted, connection killed, network: start over
                self.counters["connection_errors"] += 1
                self.last_error = f"{type(exc).__name__}: {exc}"
                log.warning("%s: Redis connection lost (%s); reconnecting in %.1fs", self.label, self.last_error, delay)
            finally:
                self.subscribed = False
                try:
                    await asyncio.wait_for(client.aclose(), 2)
                except BaseException:  # noqa: BLE001 - a dead connection may fail to close
                    pass
            if self.counters["connects"] > connects_before:
                delay = 0.1  # it was up: the next attempt comes soon
            await asyncio.sleep(delay * random.uniform(0.5, 1.0))
            delay = min(delay * 2, self._reconnect_max_s)

    def _connected(self) -> None:
        """The hub reads again (its subscription is up): counted, and said after a reconnect."""
        self.subscribed = True
        self.counters["connects"] += 1
        if self.counters["connects"] > 1:
            log.info("%s: reading from Redis again", self.label)

    async def _follow_channels(self, client: aioredis.Redis, channels: tuple[str, ...]) -> None:
        """Pub/sub on ``channels``, each message handed to ``_on_message(channel, data)``."""
        pubsub = client.pubsub(ignore_subscribe_messages=True)
        try:
            await pubsub.subscribe(*channels)
            self._connected()
            while not self._closing:
                message = await pubsub.get_message(timeout=5.0)
                if message is not None and message.get("type") == "message":
                    await self._on_message(text_of(message["channel"]), message["data"])
        finally:
            try:
                await asyncio.wait_for(pubsub.aclose(), 2)
            except BaseException:  # noqa: BLE001
                pass

    async def _on_message(self, channel: str, data: Any) -> None:
        raise NotImplementedError


async def pump(
    websocket: WebSocket,
    hub: Hub,
    subscriber: Subscriber,
    before: Callable[[Callable[[str], Awaitable[None]]], Awaitable[None]] | None = None,
) -> None:
    """Send ``subscriber``'s texts to ``websocket`` (after ``before(send)``, if given) until the
    client leaves or falls behind; then close it (1013 ``SLOW_CONSUMER`` for the latter) and
    unsubscribe. The socket must be accepted."""
    slow = asyncio.Event()

    async def send(text: str) -> None:
        try:
            await asyncio.wait_for(websocket.send_text(text), timeout=SEND_TIMEOUT_S)
        except TimeoutError:
            slow.set()
            raise

    async def send_all() -> None:
        if before is not None:
            await before(send)
        while True:
            await send(await subscriber.queue.get())

    async def watch_client() -> None:
        while (await websocket.receive())["type"] != "websocket.disconnect":
            pass  # frames from the client are ignored

    tasks = [
        asyncio.create_task(send_all()),
        asyncio.create_task(watch_client()),
        asyncio.create_task(subscriber.overflowed.wait()),
        asyncio.create_task(slow.wait()),
    ]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        hub.unsubscribe(subscriber)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    if subscriber.overflowed.is_set() or slow.is_set():
        hub.counters["slow_consumers_closed"] += 1
        behind = (
            f"more than {subscriber.queue.maxsize} events behind" if subscriber.overflowed.is_set() else "not reading"
        )
        await close_socket(websocket, CLOSE_SLOW_CONSUMER, f"{SLOW_CONSUMER}: {behind}; reconnect", wait_s=1.0)
    else:
        await close_socket(websocket, 1000, "")


async def close_socket(websocket: WebSocket, code: int, reason: str, wait_s: float = CLOSE_WAIT_S) -> None:
    if websocket.client_state != WebSocketState.CONNECTED or websocket.application_state != WebSocketState.CONNECTED:
        return
    try:  # the close frame queues behind what the socket already holds; a client that reads
        # nothing never takes it, so give up after a while (the connection is dropped then)
        await asyncio.wait_for(websocket.close(code=code, reason=reason), timeout=wait_s)
    except (TimeoutError, WebSocketDisconnect, RuntimeError, OSError):
        pass
