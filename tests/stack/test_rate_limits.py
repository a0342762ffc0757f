"""The seed's proposal rate limits (open-mutation-api.md) on real Redis, over HTTP.

Each scenario runs an API process of its own with the limits under test. Bursts come from
distinct loopback source addresses (127.0.0.x), so the per-IP buckets of different tests (and
of the rest of the suite, which proposes from 127.0.0.1) never mix. Where only admission is
under test, the API starts workflows on a task queue no worker polls: accepted mutations stay
queued, i.e. active, for as long as the test needs them to."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from sqlalchemy import func, select

from genesis.config import Settings
from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from genesis.redis_keys import ratelimit_active, ratelimit_agent_hour, ratelimit_ip_minute
from pipeline import ratelimit
from tests import agents, traits
from tests.agents import client_from, forbidden
from tests.pipeline_steps import wait_for_status, wait_for_verdict

UNPOLLED = "genesis-test-unpolled"
SEED = {
    f"ratelimit_{name}": getattr(Settings(_env_file=None).ratelimit, name)
    for name in ("active_per_agent", "proposals_per_ip_minute", "proposals_per_agent_hour")
}


def test_the_defaults_are_the_seeds():
    assert SEED == {
        "ratelimit_active_per_agent": 5,
        "ratelimit_proposals_per_ip_minute": 10,
        "ratelimit_proposals_per_agent_hour": 30,
    }


@pytest.fixture(scope="module")
async def seed_limits_url(start_api):
    return await start_api("api-seed-limits", task_queue=UNPOLLED, **SEED)


async def propose(http, agent: agents.TestAgent, code: str, trait_name: str = "limited", **headers):
    body = {"trait_name": trait_name, "goal": "rate limit test", "code": code}
    return await http.post("/api/mutations/propose", json=body, headers={**agent.headers, **headers})


async def agent_mutations(settings, agent_id: str) -> int:
    async with get_sessionmaker(settings.database_url)() as session:
        return await session.scalar(select(func.count()).select_from(Mutation).where(Mutation.agent_id == agent_id))


def assert_429(response, detail: str, low: int, high: int) -> None:
    assert response.status_code == 429, response.text
    body = response.json()
    assert set(body) == {"error", "detail", "retry_after_sec"}, body
    assert body["error"] == "RATE_LIMIT_EXCEEDED" and body["detail"] == detail
    assert low <= body["retry_after_sec"] <= high
    assert response.headers["retry-after"] == str(body["retry_after_sec"])


async def test_fifty_parallel_proposals_from_one_agent(seed_limits_url, settings, redis_client):
    ip = "127.0.0.21"
    async with client_from(seed_limits_url, ip) as http:
        me = await agents.register(http, "burst-agent")
        responses = await asyncio.gather(*(propose(http, me, traits.seeker(1000 + i)) for i in range(50)))
        profile = (await http.get("/v1/agents/me", headers=me.headers)).json()
    accepted = [r for r in responses if r.status_code == 202]
    refused = [r for r in responses if r.status_code != 202]
    assert len(accepted) == 5 and len(refused) == 45, sorted(r.status_code for r in responses)
    for response in refused:
        assert_429(response, f"Too many active mutations for agent_id '{me.agent_id}' (limit: 5)", 30, 30)
    # Nothing beyond the limit was recorded or started, and refusals consumed no quota.
    assert await agent_mutations(settings, me.agent_id) == 5
    assert await redis_client.zcard(ratelimit_active(me.agent_id)) == 5
    assert int(await redis_client.get(ratelimit_agent_hour(me.agent_id))) == 5
    assert int(await redis_client.get(ratelimit_ip_minute(ip))) == 5
    assert 0 < await redis_client.ttl(ratelimit_ip_minute(ip)) <= 60
    assert profile["reputation"]["active"] == 5 and profile["rate_limits"]["active_mutations"] == 5


async def test_proposals_per_ip_per_minute(seed_limits_url, settings, redis_client):
    async with client_from(seed_limits_url, "127.0.0.31") as http:
        crowd = [await agents.register(http, f"crowd-{i}") for i in range(3)]
        responses = await asyncio.gather(
            *(propose(http, agent, traits.seeker(1100 + 10 * n + i)) for n, agent in enumerate(crowd) for i in range(6))
        )
        assert sum(r.status_code == 202 for r in responses) == 10, [r.status_code for r in responses]
        assert all(r.status_code in (202, 429) for r in responses)
        assert all(r.json()["retry_after_sec"] >= 1 for r in responses if r.status_code == 429)
        for agent in crowd:
            assert await agent_mutations(settings, agent.agent_id) <= 5
        # The bucket is full: any agent from this IP is refused until the minute is over.
        late = await agents.register(http, "late")
        assert_429(
            await propose(http, late, traits.seeker(1190)),
            "Too many proposals from IP 127.0.0.31 this minute (limit: 10 per minute)",
            1,
            60,
        )
        assert int(await redis_client.get(ratelimit_ip_minute("127.0.0.31"))) == 10
    async with client_from(seed_limits_url, "127.0.0.32") as http:
        assert (await propose(http, late, traits.seeker(1191))).status_code == 202, "another IP has its own bucket"


async def recorded_client_ip(settings, mutation_id: str) -> str | None:
    async with get_sessionmaker(settings.database_url)() as session:
        return await session.scalar(select(Mutation.client_ip).where(Mutation.mutation_id == mutation_id))


async def test_forged_forwarded_for_does_not_pick_the_rate_limit_key(seed_limits_url, settings, redis_client):
    """X-Forwarded-For from a client that is not a configured proxy (none by default; uvicorn by
    itself believes 127.0.0.1) is ignored: each proposal claims another address, all count against
    the connection's own."""
    ip = "127.0.0.1"
    await redis_client.delete(ratelimit_ip_minute(ip))  # the rest of the suite proposes from here too
    async with client_from(seed_limits_url, ip) as http:
        crowd = [await agents.register(http, f"forger-{i}") for i in range(3)]
        responses = [
            await propose(
                http,
                crowd[n % 3],
                traits.seeker(1300 + n),
                **{"X-Forwarded-For": f"203.0.113.{n}", "X-Forwarded-Proto": "https"},
            )
            for n in range(11)
        ]
    assert [r.status_code for r in responses] == [202] * 10 + [429], [r.text for r in responses]
    assert_429(responses[-1], f"Too many proposals from IP {ip} this minute (limit: 10 per minute)", 1, 60)
    assert int(await redis_client.get(ratelimit_ip_minute(ip))) == 10
    assert not await redis_client.keys(ratelimit_ip_minute("203.0.113.*"))
    assert await recorded_client_ip(settings, responses[0].json()["mutation_id"]) == ip


async def test_forwarded_for_is_believed_from_a_configured_proxy(start_api, settings):
    url = await start_api("api-behind-proxy", task_queue=UNPOLLED, trusted_proxies="127.0.0.72")
    async with client_from(url, "127.0.0.72") as proxy, client_from(url, "127.0.0.73") as stranger:
        me = await agents.register(proxy, "behind-proxy")
        via_proxy = await propose(proxy, me, traits.seeker(1320), **{"X-Forwarded-For": "198.51.100.7"})
        direct = await propose(stranger, me, traits.seeker(1321), **{"X-Forwarded-For": "198.51.100.8"})
    assert via_proxy.status_code == 202 and direct.status_code == 202, (via_proxy.text, direct.text)
    assert await recorded_client_ip(settings, via_proxy.json()["mutation_id"]) == "198.51.100.7"
    assert await recorded_client_ip(settings, direct.json()["mutation_id"]) == "127.0.0.73"


async def test_proposals_per_agent_per_hour(start_api, settings):
    url = await start_api(
        "api-hourly",
        task_queue=UNPOLLED,
        ratelimit_active_per_agent=1000,
        ratelimit_proposals_per_ip_minute=1000,
        ratelimit_proposals_per_agent_hour=30,
    )
    async with client_from(url, "127.0.0.41") as http:
        me = await agents.register(http, "hourly-agent")
        responses = await asyncio.gather(*(propose(http, me, traits.seeker(1200 + i)) for i in range(50)))
    assert sum(r.status_code == 202 for r in responses) == 30
    for response in (r for r in responses if r.status_code != 202):
        assert_429(
            response, f"Too many proposals from agent_id '{me.agent_id}' this hour (limit: 30 per hour)", 3500, 3600
        )
    assert await agent_mutations(settings, me.agent_id) == 30


async def test_retried_idempotent_proposal_is_not_counted_twice(seed_limits_url, redis_client):
    async with client_from(seed_limits_url, "127.0.0.61") as http:
        me = await agents.register(http, "idempotent-agent")
        key = {"Idempotency-Key": uuid.uuid4().hex}
        responses = await asyncio.gather(*(propose(http, me, traits.seeker(1300), **key) for _ in range(12)))
    assert {r.status_code for r in responses} == {202}
    assert len({r.json()["mutation_id"] for r in responses}) == 1
    assert await redis_client.zcard(ratelimit_active(me.agent_id)) == 1
    assert int(await redis_client.get(ratelimit_agent_hour(me.agent_id))) == 1
    assert int(await redis_client.get(ratelimit_ip_minute("127.0.0.61"))) == 1


async def test_terminal_states_release_the_active_slot(start_api, redis_client):
    """Through the real worker: a live mutation holds the agent's only slot until it is rolled
    back; a rejected one gives it back as soon as it is rejected."""
    url = await start_api(
        "api-one-active",
        ratelimit_active_per_agent=1,
        ratelimit_proposals_per_ip_minute=1000,
        ratelimit_proposals_per_agent_hour=1000,
    )
    async with client_from(url, "127.0.0.51") as http:
        me = await agents.register(http, "one-at-a-time")
        live = await propose(http, me, traits.seeker(1400), "one_slot")
        assert live.status_code == 202, live.text
        live_id = live.json()["mutation_id"]
        await wait_for_status(http, live_id, {"activated"})
        assert_429(
            await propose(http, me, forbidden("wait")),
            f"Too many active mutations for agent_id '{me.agent_id}' (limit: 1)",
            30,
            30,
        )
        assert (await http.post(f"/api/mutations/{live_id}/rollback", headers=me.headers)).status_code == 202
        await wait_for_status(http, live_id, {"rolled_back"})
        assert await redis_client.zcard(ratelimit_active(me.agent_id)) == 0
        for attempt in range(2):  # rejected mutations free the slot too
            response = await propose(http, me, forbidden(f"next{attempt}"))
            assert response.status_code == 202, response.text
            assert (await wait_for_verdict(http, response.json()["mutation_id"]))["status"] == "rejected"
            assert await redis_client.zcard(ratelimit_active(me.agent_id)) == 0


async def test_code_size_limit_is_32_kb(http, redis_client):
    me = await agents.register(http, "big-coder")
    base = forbidden("big") + "#"
    exact = base + "x" * (32 * 1024 - len(base.encode()) - 1) + "\n"
    assert len(exact.encode()) == 32 * 1024
    ok = await propose(http, me, exact, "big_code")
    assert ok.status_code == 202, ok.text
    status = await wait_for_verdict(http, ok.json()["mutation_id"])
    assert status["failure_reason_code"] == "AST_IMPORT_FORBIDDEN", "32 KB passed the schema step"
    over = await propose(http, me, exact + "#", "big_code")
    assert over.status_code == 422 and over.json()["error"] == "VALIDATION_ERROR"
    assert "code is 32,769 bytes; the limit is 32,768" in over.json()["detail"]
    huge = await propose(http, me, "#" * 200_000, "big_code")
    assert huge.status_code == 413 and huge.json()["error"] == "PAYLOAD_TOO_LARGE"
    assert int(await redis_client.get(ratelimit_agent_hour(me.agent_id))) == 1, "refused bodies are not counted"


async def test_the_script_is_atomic_idempotent_and_refundable(redis_client):
    agent_id, ip = f"script-{uuid.uuid4().hex[:6]}", f"10.9.{uuid.uuid4().int % 250}.1"
    limits = ratelimit.Limits(
        active_per_agent=2, per_ip_minute=100, per_agent_hour=100, active_slot_ttl_s=1, active_retry_after_s=7
    )
    first = await ratelimit.acquire(redis_client, limits, agent_id, ip, "mut_a")
    again = await ratelimit.acquire(redis_client, limits, agent_id, ip, "mut_a")
    assert first.allowed and not first.already_held and again.allowed and again.already_held
    assert int(await redis_client.get(ratelimit_agent_hour(agent_id))) == 1
    decisions = await asyncio.gather(
        *(ratelimit.acquire(redis_client, limits, agent_id, ip, f"mut_{i}") for i in range(20))
    )
    assert sum(d.allowed for d in decisions) == 1
    refused = next(d for d in decisions if not d.allowed)
    assert refused.limit == "active" and refused.retry_after_sec == 7 and refused.limit_value == 2
    await ratelimit.refund(redis_client, agent_id, ip, "mut_a")
    await ratelimit.refund(redis_client, agent_id, ip, "mut_a")  # twice: given back once
    assert await redis_client.zcard(ratelimit_active(agent_id)) == 1
    assert int(await redis_client.get(ratelimit_agent_hour(agent_id))) == 1
    assert await ratelimit.release(redis_client, agent_id, "mut_unknown") is False
    await asyncio.sleep(1.2)  # a slot whose mutation never ended lapses after active_slot_ttl_s
    assert (await ratelimit.acquire(redis_client, limits, agent_id, ip, "mut_b")).allowed
    assert (await ratelimit.acquire(redis_client, limits, agent_id, ip, "mut_c")).allowed
    assert await redis_client.zcard(ratelimit_active(agent_id)) == 2
