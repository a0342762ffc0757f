"""Agent identity over HTTP: registration, API keys (stored hashed), /v1/agents/me with
reputation, keys on write endpoints, no impersonation, and GENESIS_AUTH=open."""

from __future__ import annotations

import hashlib
import hmac
import threading
import uuid

import httpx
import pytest
import redis.asyncio as aioredis
from sqlalchemy import text

from genesis import redis_keys as keys
from genesis.db.models import Agent
from genesis.db.session import get_sessionmaker
from identity import apikeys
from tests import agents, traits
from tests.agents import forbidden
from tests.own_stack import redis_db_below
from tests.pipeline_steps import sample, signal_window, wait_for_status, wait_for_verdict


async def post_proposal(http, code: str, trait_name: str, key: str | None = None, agent_id: str | None = None):
    body = {"trait_name": trait_name, "goal": "identity test", "code": code}
    if agent_id is not None:
        body["agent_id"] = agent_id
    return await http.post("/api/mutations/propose", json=body, headers={"X-API-Key": key} if key else {})


async def test_register_returns_an_id_and_a_key_stored_only_as_a_hash(http, settings):
    response = await http.post("/v1/agents/register", json={"name": "MyBot", "description": "test agent"})
    assert response.status_code == 201, response.text
    assert response.headers["cache-control"] == "no-store"
    body = response.json()
    assert body["agent_id"].startswith("agt_") and body["name"] == "MyBot" and body["description"] == "test agent"
    key = body["api_key"]
    assert apikeys.prefix_of(key) == body["key_prefix"]
    assert "shown only once" in body["message"]
    async with get_sessionmaker(settings.database_url)() as session:
        row = await session.get(Agent, body["agent_id"])
        dumped = (
            await session.execute(text("SELECT agents::text FROM agents WHERE agent_id = :a"), {"a": body["agent_id"]})
        ).scalar_one()
    assert key not in dumped and key.split("_", 2)[2] not in dumped, "the key itself is never stored"
    pepper = settings.api.key_pepper.get_secret_value().encode()
    assert row.key_scheme == "hmac-sha256"
    assert row.key_hash == hmac.new(pepper, key.encode(), hashlib.sha256).hexdigest()
    assert row.key_prefix == body["key_prefix"]

    other = (await http.post("/v1/agents/register", json={"name": "MyBot"})).json()
    assert other["agent_id"] != body["agent_id"] and other["api_key"] != key, "names need not be unique"


@pytest.mark.parametrize(
    "payload, field",
    [
        ({}, "name"),
        ({"name": ""}, "name"),
        ({"name": "   "}, "name"),
        ({"name": "x" * 65}, "name"),
        ({"name": "ok", "member_id": 3}, "member_id"),
        ({"name": "ok", "description": "a\u0000b"}, "description"),
        ({"name": "tab\tname"}, "name"),
    ],
)
async def test_register_validates_its_fields(http, payload, field):
    response = await http.post("/v1/agents/register", json=payload)
    assert response.status_code == 422, response.text
    assert response.json()["error"] == "VALIDATION_ERROR"
    assert any(e["field"] == field for e in response.json()["errors"])


async def test_register_me_propose_and_reputation(http, temporal_client):
    me = await agents.register(http, "reputation-bot", "counts its mutations")
    profile = await http.get("/v1/agents/me", headers=me.headers)
    assert profile.status_code == 200, profile.text
    body = profile.json()
    assert body["agent_id"] == me.agent_id and body["name"] == "reputation-bot"
    assert body["description"] == "counts its mutations" and body["registered_at"].endswith("Z")
    assert body["reputation"] == {
        "proposed": 0,
        "active": 0,
        "activated": 0,
        "kept": 0,
        "rolled_back": 0,
        "rejected": 0,
        "failed": 0,
    }

    # The key alone names the agent: no agent_id in the body.
    rejected = await post_proposal(http, forbidden("rep"), "rep_rejected", key=me.api_key)
    assert rejected.status_code == 202, rejected.text
    kept = await post_proposal(http, traits.seeker(901), "rep_kept", key=me.api_key)
    # Or the key's own agent_id in the body.
    withdrawn = await post_proposal(http, traits.seeker(902), "rep_withdrawn", key=me.api_key, agent_id=me.agent_id)
    assert kept.status_code == withdrawn.status_code == 202

    status = await wait_for_verdict(http, rejected.json()["mutation_id"])
    assert status["status"] == "rejected" and status["agent_id"] == me.agent_id
    kept_id, withdrawn_id = kept.json()["mutation_id"], withdrawn.json()["mutation_id"]
    await wait_for_status(http, kept_id, {"activated"})
    await wait_for_status(http, withdrawn_id, {"activated"})
    in_flight = (await http.get("/v1/agents/me", headers=me.headers)).json()
    assert in_flight["reputation"]["active"] == 2 and in_flight["rate_limits"]["active_mutations"] == 2
    await signal_window(temporal_client, kept_id, sample(300, 100, 50.0, 5), sample(600, 110, 55.0, 2))
    assert (await wait_for_status(http, kept_id, {"kept"}))["agent_id"] == me.agent_id
    rollback = await http.post(f"/api/mutations/{withdrawn_id}/rollback", json={"reason": "mine"}, headers=me.headers)
    assert rollback.status_code == 202, rollback.text
    await wait_for_status(http, withdrawn_id, {"rolled_back"})

    final = (await http.get("/v1/agents/me", headers=me.headers)).json()
    assert final["reputation"] == {
        "proposed": 3,
        "active": 0,
        "activated": 2,
        "kept": 1,
        "rolled_back": 1,
        "rejected": 1,
        "failed": 0,
    }
    # Terminal states gave the active slots back; the hourly counter remembers all three.
    assert final["rate_limits"]["active_mutations"] == 0
    assert final["rate_limits"]["proposals_this_hour"] == 3
    assert 0 < final["rate_limits"]["hour_resets_in_sec"] <= 3600


async def test_missing_and_invalid_keys_are_401(http):
    me = await agents.agent(http)
    prefix = apikeys.prefix_of(me.api_key)
    wrong_secret = f"gen_{prefix}_{'A' * 43}"
    unknown = f"gen_{'0' * 8}_{'B' * 43}"
    for key, error in [
        (None, "API_KEY_REQUIRED"),
        ("not-a-key", "INVALID_API_KEY"),
        (unknown, "INVALID_API_KEY"),
        (wrong_secret, "INVALID_API_KEY"),
        (me.api_key + "x", "INVALID_API_KEY"),
    ]:
        response = await post_proposal(http, forbidden("nokey"), "no_key", key=key, agent_id=me.agent_id)
        assert response.status_code == 401, (key, response.text)
        assert response.json()["error"] == error
        assert response.headers["www-authenticate"] == 'ApiKey header="X-API-Key"'
        profile = await http.get("/v1/agents/me", headers={"X-API-Key": key} if key else {})
        assert profile.status_code == 401 and profile.json()["error"] == error
    assert "POST /v1/agents/register" in (await post_proposal(http, forbidden("x"), "x")).json()["detail"]


async def test_an_agent_cannot_act_as_another(http):
    alice = await agents.register(http, "alice")
    bob = await agents.register(http, "bob")
    response = await post_proposal(http, forbidden("imp"), "impostor", key=bob.api_key, agent_id=alice.agent_id)
    assert response.status_code == 403, response.text
    body = response.json()
    assert body["error"] == "AGENT_ID_MISMATCH"
    assert bob.agent_id in body["detail"] and alice.agent_id in body["detail"]

    mine = await post_proposal(http, forbidden("alice"), "alices", key=alice.api_key)
    mutation_id = mine.json()["mutation_id"]
    await wait_for_verdict(http, mutation_id)
    for key, code, error in [(bob.api_key, 403, "NOT_YOUR_MUTATION"), (None, 401, "API_KEY_REQUIRED")]:
        response = await http.post(f"/api/mutations/{mutation_id}/rollback", headers={"X-API-Key": key} if key else {})
        assert response.status_code == code, response.text
        assert response.json()["error"] == error
    # Its owner gets the ordinary answer (a rejected mutation never went live).
    response = await http.post(f"/api/mutations/{mutation_id}/rollback", headers=alice.headers)
    assert response.status_code == 409 and response.json()["error"] == "NOT_ROLLBACKABLE"
    # Reading stays public.
    assert (await http.get(f"/api/mutations/{mutation_id}/status")).status_code == 200


async def test_open_mode_takes_agent_id_from_the_body(start_api):
    url = await start_api("api-open", auth="open")
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        name = f"curl-{uuid.uuid4().hex[:6]}"
        response = await post_proposal(http, forbidden("open"), "open_mode", agent_id=name)
        assert response.status_code == 202, response.text
        status = await wait_for_verdict(http, response.json()["mutation_id"])
        assert status["agent_id"] == name and status["failure_reason_code"] == "AST_IMPORT_FORBIDDEN"

        missing = await post_proposal(http, forbidden("open2"), "open_mode")
        assert missing.status_code == 422 and missing.json()["error"] == "VALIDATION_ERROR"
        assert missing.json()["errors"][0]["field"] == "agent_id"

        # A key, when sent, is still checked and binds the agent.
        me = await agents.register(http, "open-mode-bot")
        bound = await post_proposal(http, forbidden("open3"), "open_mode", key=me.api_key)
        assert bound.status_code == 202
        assert (await wait_for_verdict(http, bound.json()["mutation_id"]))["agent_id"] == me.agent_id
        assert (await post_proposal(http, forbidden("open4"), "open_mode", key="gen_bad")).status_code == 401
        impostor = await post_proposal(http, forbidden("open5"), "open_mode", key=me.api_key, agent_id=name)
        assert impostor.status_code == 403
        assert (await http.get("/v1/agents/me")).status_code == 401, "there is no 'me' without a key"
        # Keyless rollback is allowed in open mode.
        rollback = await http.post(f"/api/mutations/{response.json()['mutation_id']}/rollback")
        assert rollback.status_code == 409 and rollback.json()["error"] == "NOT_ROLLBACKABLE"


def test_pepper_is_created_once_and_shared(tmp_path):
    assert apikeys.load_pepper("configured", tmp_path) == b"configured"
    assert not list(tmp_path.iterdir()), "a configured pepper writes nothing"
    results: list[bytes] = []
    threads = [threading.Thread(target=lambda: results.append(apikeys.load_pepper("", tmp_path))) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(results)) == 1 and len(results[0]) == 64
    path = tmp_path / apikeys.PEPPER_FILE
    assert path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in tmp_path.iterdir()] == [apikeys.PEPPER_FILE]
    assert apikeys.load_pepper("", tmp_path) == results[0]


def test_keys_are_checked_against_a_peppered_digest():
    pepper = b"p" * 32
    issued = apikeys.issue(pepper)
    assert apikeys.matches(pepper, issued.key, issued.digest)
    assert not apikeys.matches(b"other pepper", issued.key, issued.digest), "the pepper is part of the hash"
    assert not apikeys.matches(pepper, issued.key[:-1] + "x", issued.digest)
    assert apikeys.prefix_of(issued.key) == issued.prefix and apikeys.prefix_of("gen_zz_x") is None


async def test_registration_is_limited_per_address_and_may_need_an_invitation(start_api, settings):
    """Onboarding cannot be emptied by one client: registrations from one address are counted per
    hour; a server that registers by invitation takes only an operator's single-use code."""
    operator = await agents.operator_headers(settings)
    own_redis = redis_db_below(8)  # the suite's registrations count on the suite's db
    redis = aioredis.from_url(own_redis)
    await redis.delete(keys.ratelimit_register_ip_hour("127.0.0.1"))
    await redis.aclose()
    limited = await start_api("register-limited", redis_url=own_redis, ratelimit_registrations_per_ip_hour=3)
    async with httpx.AsyncClient(base_url=limited, timeout=30) as http:
        answers = [await http.post("/v1/agents/register", json={"name": f"flood-{i}"}) for i in range(4)]
        assert [a.status_code for a in answers] == [201, 201, 201, 429], [a.text for a in answers]
        over = answers[-1]
        assert over.json()["error"] == "RATE_LIMIT_EXCEEDED" and int(over.headers["Retry-After"]) > 0
        assert "registered from IP" in over.json()["detail"] and all(a.json()["member_id"] is None for a in answers[:3])

    invited = await start_api("register-invited", registration="invitation")
    async with httpx.AsyncClient(base_url=invited, timeout=30) as http:
        uninvited = await http.post("/v1/agents/register", json={"name": "uninvited"})
        assert uninvited.status_code == 403 and uninvited.json()["error"] == "INVITATION_REQUIRED", uninvited.text
        made = await http.post("/v1/agents/invitations", json={"note": "for a test"}, headers=operator)
        assert made.status_code == 201 and made.headers["Cache-Control"] == "no-store", made.text
        code = made.json()["invitation"]
        welcome = await http.post("/v1/agents/register", json={"name": "invited", "invitation": code})
        assert welcome.status_code == 201, welcome.text
        again = await http.post("/v1/agents/register", json={"name": "invited-twice", "invitation": code})
        assert again.status_code == 403 and again.json()["error"] == "INVALID_INVITATION", again.text
        malformed = await http.post("/v1/agents/register", json={"name": "x", "invitation": "let-me-in"})
        assert malformed.status_code == 422 and "invitation" in malformed.json()["detail"]
        member = {"X-API-Key": welcome.json()["api_key"]}
        by_agent = await http.post("/v1/agents/invitations", json={}, headers=member)
        assert by_agent.status_code in (401, 403), by_agent.text  # an operator's alone
