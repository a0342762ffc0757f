"""Redis away: every read the world viewer makes answers 200 (from Postgres) or 503
REDIS_UNAVAILABLE in the API's error shape, never a bare 500, and the answer leaks no address."""

from __future__ import annotations

import httpx
import pytest

from cli.processes import free_port

# What the viewer's page reads (api/viewer/static/*.js), each once.
VIEWER_READS = (
    "/api/viewer/config",
    "/api/stats",
    "/api/world/state",
    "/api/world/entities/1",
    "/api/world/history",
    "/api/traits",
    "/api/traits/redis_down_trait",
    "/api/traits/redis_down_trait/lineage",
    "/api/mutations",
    "/api/mutations/mut_000000000000/status",
    "/api/mutations/mut_000000000000/effects",
    "/api/feed",
    "/v1/governance/proposals",
    "/v1/manifest",
    "/v1/agents/me",
)


@pytest.fixture(scope="module")
async def redis_down_api(start_api):
    return await start_api("api-redis-down", redis_url=f"redis://127.0.0.1:{free_port()}/0", auth="open")


@pytest.mark.parametrize("path", VIEWER_READS)
async def test_a_viewer_read_without_redis_is_an_answer_not_a_500(redis_down_api, path):
    async with httpx.AsyncClient(base_url=redis_down_api, timeout=30) as http:
        response = await http.get(path)
    assert response.status_code < 500 or response.status_code == 503, (path, response.status_code, response.text)
    if response.status_code == 503:
        body = response.json()
        assert body["error"] in ("REDIS_UNAVAILABLE", "ENGINE_NOT_RUNNING"), body
        assert "127.0.0.1" not in body["detail"], body
