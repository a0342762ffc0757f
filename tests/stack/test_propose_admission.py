"""Propose admits on raw asyncpg statements (genesis/proposal_store.py): when Postgres cannot be
reached, the answer is 503 DATABASE_UNAVAILABLE, nothing is recorded and no quota is taken."""

from __future__ import annotations

import uuid

import httpx

from genesis.cli.processes import free_port
from genesis.redis_keys import ratelimit_active, ratelimit_agent_hour
from tests import traits


async def test_propose_without_postgres_is_503_and_takes_no_quota(start_api, redis_client):
    down_db = f"postgresql+asyncpg://genesis:genesis@127.0.0.1:{free_port()}/genesis"
    url = await start_api("api-postgres-down", database_url=down_db, auth="open", workflow_start_sweep_s=3600)
    agent_id = f"pg-down-{uuid.uuid4().hex[:8]}"
    body = {"agent_id": agent_id, "trait_name": "pg_down_seeker", "code": traits.seeker(9090)}
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        response = await http.post("/api/mutations/propose", json=body)
    assert response.status_code == 503, response.text
    answer = response.json()
    assert answer["error"] == "DATABASE_UNAVAILABLE"
    assert answer["detail"].startswith("Postgres is not reachable: ")
    for key in (ratelimit_active(agent_id), ratelimit_agent_hour(agent_id)):
        assert not await redis_client.exists(key), key
