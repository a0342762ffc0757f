"""WebSockets are a budget (api/socket_budget.py, api/fanout.py): one address holds at most its
share, the process at most its total, a refused socket is told why, and no socket holds a Redis
connection, so a flood of them leaves every other request answering."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
import redis.asyncio as aioredis
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from tests import agents
from tests.own_stack import redis_db_below

PER_CLIENT, TOTAL = 8, 12
ROUTES = ("/ws/world", "/ws/feed", "/api/agents/telemetry")


async def refusal(url: str, local_host: str = "127.0.0.1") -> tuple[dict, int | None]:
    """The answer and HTTP status of a handshake the budget refuses (before the upgrade)."""
    with pytest.raises(InvalidStatus) as refused:
        async with connect(url, local_addr=(local_host, 0), open_timeout=10):
            pass
    response = refused.value.response
    assert response.headers["Retry-After"] == "5"
    return json.loads(response.body), response.status_code


async def redis_clients_on(redis: aioredis.Redis, db: int) -> int:
    return sum(1 for client in await redis.client_list() if int(client["db"]) == db)


async def test_one_address_holds_its_share_and_no_socket_holds_a_redis_connection(start_api):
    redis_url = redis_db_below(8)
    db = int(redis_url.rsplit("/", 1)[1])
    api_url = await start_api(
        "api-sockets", redis_url=redis_url, api_sockets_per_client=PER_CLIENT, api_sockets_total=TOTAL
    )
    ws_base = api_url.replace("http://", "ws://")
    redis = aioredis.from_url(redis_url)
    held = []
    try:
        async with httpx.AsyncClient(base_url=api_url, timeout=30) as http:
            assert (await http.get("/api/feed")).status_code == 200  # the request pool is warm
            before = await redis_clients_on(redis, db)
            for i in range(PER_CLIENT):
                held.append(await connect(ws_base + ROUTES[i % len(ROUTES)], open_timeout=10).__aenter__())
            frame, code = await refusal(ws_base + "/ws/world")
            assert code == 429 and frame["error"] == "TOO_MANY_SOCKETS", (frame, code)
            assert f"already has {PER_CLIENT} WebSockets open" in frame["detail"]

            # Another address has its own share, up to the process's total.
            for _ in range(TOTAL - PER_CLIENT):
                held.append(await connect(ws_base + "/ws/feed", local_addr=("127.0.0.2", 0)).__aenter__())
            frame, code = await refusal(ws_base + "/ws/feed", local_host="127.0.0.3")
            assert code == 429 and f"already holds {TOTAL} WebSockets" in frame["detail"], frame

            # A flood of 500 more from the first address: each refused; the rest answers meanwhile.
            async def flood(count: int) -> list[int | None]:
                return [(await refusal(ws_base + ROUTES[i % len(ROUTES)]))[1] for i in range(count)]

            flooding = asyncio.gather(*(flood(50) for _ in range(10)))
            agent = await agents.register(http, "socket-flood-honest")
            answers = []
            while not flooding.done():
                answers += [
                    (await http.get("/api/traits")).status_code,
                    (await http.get("/api/feed", params={"limit": 5})).status_code,
                    (
                        await http.post(
                            "/api/mutations/check",
                            headers=agent.headers,
                            json={"trait_name": "flood_probe", "code": "import os\n"},
                        )
                    ).status_code,
                ]
            codes = [code for batch in await flooding for code in batch]
            assert codes == [429] * 500
            assert answers and set(answers) <= {200, 422}, answers  # never 503: nothing starved
            assert await redis_clients_on(redis, db) - before <= 2, "sockets hold no Redis connection"

            # A socket given back is a slot free again.
            await held.pop(0).close()
            await asyncio.sleep(0.5)
            async with connect(ws_base + "/ws/world", open_timeout=10) as again:
                try:
                    assert "error" not in json.loads(await asyncio.wait_for(again.recv(), 1))
                except TimeoutError:
                    pass  # no engine on this Redis db: an idle stream, open and not refused
    finally:
        for ws in held:
            await ws.close()
        await redis.aclose()
