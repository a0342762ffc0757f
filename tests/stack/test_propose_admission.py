"""Propose admits through the process's one SQLAlchemy engine (api/mutations/admission.py): when Postgres
cannot be reached, the answer is 503 DATABASE_UNAVAILABLE, nothing is recorded and no quota is
taken; pooled connections the server closed (as a restart does) are replaced at checkout, with
no failed proposal and no ping."""

from __future__ import annotations

import asyncio
import time
import uuid

import httpx
from sqlalchemy import text

from cli.processes import free_port
from genesis.db.session import get_engine
from genesis.redis_keys import ratelimit_active, ratelimit_agent_hour
from tests import traits

# The API's idle connections whose last statement was the admission's insert or lookups.
ADMISSION_CONNECTIONS = """
    SELECT pid FROM pg_stat_activity
    WHERE datname = current_database() AND pid <> pg_backend_pid() AND state = 'idle'
      AND (query LIKE 'INSERT INTO mutations %'
           OR query LIKE 'SELECT trait_versions.version, trait_versions.mutation_id%'
           OR query LIKE 'SELECT mutations.mutation_id, mutations.status%')
"""


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
    assert answer["detail"].startswith("Postgres is unavailable: ")
    for key in (ratelimit_active(agent_id), ratelimit_agent_hour(agent_id)):
        assert not await redis_client.exists(key), key


async def test_connections_the_server_closed_are_replaced_without_a_failed_proposal(start_api, settings):
    # A task queue no worker polls: the accepted proposals' workflows wait there, costing nothing.
    url = await start_api(
        "api-postgres-closed", auth="open", workflow_start_sweep_s=3600, task_queue=f"idle-{uuid.uuid4().hex[:8]}"
    )
    agent_id = f"pg-closed-{uuid.uuid4().hex[:8]}"

    async def propose(variant: int) -> httpx.Response:
        body = {"agent_id": agent_id, "trait_name": f"closed_seeker_{variant}", "code": traits.seeker(variant)}
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            return await http.post("/api/mutations/propose", json=body)

    first = await propose(7_100_001)
    assert first.status_code == 202, first.text
    async with get_engine(settings.database_url).connect() as conn:
        await conn.execution_options(isolation_level="AUTOCOMMIT")  # pg_stat_activity is fresh per statement
        pids = list(await conn.scalars(text(ADMISSION_CONNECTIONS)))
        assert pids, "the admission left no pooled connection"
        await conn.execute(
            text("SELECT pg_terminate_backend(pid) FROM unnest(CAST(:pids AS int[])) AS pid"), {"pids": pids}
        )
        deadline = time.monotonic() + 10
        while await conn.scalar(
            text("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(CAST(:pids AS int[]))"), {"pids": pids}
        ):
            assert time.monotonic() < deadline, "the terminated backends did not exit"
            await asyncio.sleep(0.05)
    for variant in range(7_100_002, 7_100_003 + len(pids)):  # more proposals than closed connections
        response = await propose(variant)
        assert response.status_code == 202, response.text
