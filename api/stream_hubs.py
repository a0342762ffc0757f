"""The hubs of ``WS /ws/world`` (viewer frames) and ``WS /ws/feed`` (the Evolution Feed): one
Redis reader each per API process, fanned out to their sockets (api/fanout.py)."""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from api.fanout import Hub, text_of
from evolution import feed
from genesis.redis_keys import FEED_STREAM, Channels

FEED_BLOCK_MS = 2000  # well inside redis-py's default 5 s socket timeout
FEED_READ_LIMIT = 100


class WorldFramesHub(Hub):
    """``ch:world:frames``: each socket keeps only the newest frame it has not been sent (a slow
    viewer skips frames; it is never closed for it)."""

    label = "world-frames"

    async def _follow(self, client: aioredis.Redis) -> None:
        await self._follow_channels(client, (Channels.WORLD_FRAMES,))

    async def _on_message(self, channel: str, data: Any) -> None:
        self._deliver(text_of(data))


class FeedHub(Hub):
    """``feed:stream``, read with a blocking XREAD on the hub's own connection from where it last
    read (a reconnect loses nothing the capped stream still holds). Each text is a feed message
    as ``GET /api/feed`` serves it; ``last_id`` is the id of the newest one delivered."""

    label = "feed"

    def __init__(self, redis_url: str, *, queue_size: int, reconnect_max_s: float) -> None:
        super().__init__(redis_url, queue_size=queue_size, reconnect_max_s=reconnect_max_s)
        self.last_id: str | None = None

    async def _follow(self, client: aioredis.Redis) -> None:
        if self.last_id is None:  # from now on: the newest id as the start ('$' could miss one)
            newest = await client.xrevrange(FEED_STREAM, count=1)
            self.last_id = text_of(newest[0][0]) if newest else "0-0"
        else:
            await client.ping()
        self._connected()
        while not self._closing:
            for message in await feed.wait_new(client, self.last_id, block_ms=FEED_BLOCK_MS, limit=FEED_READ_LIMIT):
                self.last_id = message["id"]
                self._deliver(feed.dumps(message))
