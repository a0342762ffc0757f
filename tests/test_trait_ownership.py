"""Nobody takes over another agent's trait: a replacement by anyone but the owner of the live
version is 403 (single and batch propose, with replaces and under the permissive policy); an
operator may replace it; the owner of the replaced version may roll the replacement back, and v1
is live again; a rollback of a version that is not live says so."""

from __future__ import annotations

import httpx
import pytest

from tests import agents
from tests.test_lifecycle import wait_for_status
from tests.test_modify_trait import code, fresh_name, go_live, propose


@pytest.fixture(scope="module")
async def own_url(start_api):
    # A huge observation window: activated versions stay live until the test rolls them back.
    return await start_api("api-ownership", observation_window_ticks=1_000_000_000)


@pytest.fixture
async def client(own_url):
    async with httpx.AsyncClient(base_url=own_url, timeout=30) as http:
        yield http


async def live_version(http, name: str) -> int | None:
    return (await http.get(f"/api/traits/{name}")).json()["live_version"]


async def test_a_non_owner_cannot_replace_a_live_trait(client, start_api):
    http = client
    alice, bob = await agents.register(http, "alice-owner"), await agents.register(http, "bob-intruder")
    name = fresh_name("owned")
    v1 = await go_live(http, alice, name)

    for replaces in ({"trait_name": name, "version": 1}, {"trait_name": name}):
        response = await propose(http, bob, name, code(), replaces)
        assert response.status_code == 403, response.text
        body = response.json()
        assert body["error"] == "NOT_TRAIT_OWNER" and body["owner_agent_id"] == alice.agent_id
        assert body["live_version"] == 1 and v1["mutation_id"] in body["detail"]
        assert "only the agent that made the live version, or an operator (X-Operator-Key)" in body["detail"]
    batch = await http.post("/api/mutations/propose/batch", headers=bob.headers, json={"proposals": [
        {"trait_name": name, "goal": "g", "code": code(), "replaces": {"trait_name": name}}]})
    [item] = batch.json()["results"]
    assert (item["status_code"], item["error"]) == (403, "NOT_TRAIT_OWNER"), batch.text
    # Without replaces it is still 409 TRAIT_EXISTS (the default policy) ...
    response = await propose(http, bob, name, code())
    assert response.status_code == 409 and response.json()["error"] == "TRAIT_EXISTS"
    # ... and under the permissive policy, where it would replace the live version, 403 as well.
    permissive = await start_api("api-ownership-replace", trait_exists_policy="replace")
    async with httpx.AsyncClient(base_url=permissive, timeout=30) as other:
        response = await propose(other, bob, name, code())
        assert response.status_code == 403 and response.json()["error"] == "NOT_TRAIT_OWNER", response.text
    assert await live_version(http, name) == 1
    # The owner replaces it as before.
    v2 = await go_live(http, alice, name, replaces={"trait_name": name, "version": 1})
    assert v2["trait_version"] == 2
    await http.post(f"/api/mutations/{v2['mutation_id']}/rollback", headers=alice.headers)
    await wait_for_status(http, v2["mutation_id"], {"rolled_back"}, 60)
    await http.post(f"/api/mutations/{v1['mutation_id']}/rollback", headers=alice.headers)


async def test_the_replaced_owner_rolls_back_an_operators_replacement(client, settings):
    """An operator lets Bob replace Alice's v1 (X-Operator-Key beside Bob's key); Alice takes v2
    out again and v1 is live; Carol, who owns neither, may not."""
    http = client
    alice, bob, carol = [await agents.register(http, n) for n in ("alice-v1", "bob-v2", "carol-bystander")]
    operator = await agents.operator(settings)
    name = fresh_name("handed")
    v1 = await go_live(http, alice, name)
    response = await http.post("/api/mutations/propose", headers={**bob.headers, **operator.headers}, json={
        "trait_name": name, "goal": "operator-approved takeover", "code": code(),
        "replaces": {"trait_name": name, "version": 1}})
    assert response.status_code == 202, response.text
    v2 = await wait_for_status(http, response.json()["mutation_id"], {"activated", "rejected", "failed"}, 90)
    assert v2["status"] == "activated" and v2["agent_id"] == bob.agent_id and v2["replaced_version"] == 1

    refused = await http.post(f"/api/mutations/{v2['mutation_id']}/rollback", headers=carol.headers)
    assert refused.status_code == 403 and refused.json()["error"] == "NOT_YOUR_MUTATION", refused.text
    assert "or the agent whose version it replaced" in refused.json()["detail"]

    rolled = await http.post(f"/api/mutations/{v2['mutation_id']}/rollback", json={"reason": "not yours"},
                             headers=alice.headers)
    assert rolled.status_code == 202, rolled.text
    done = await wait_for_status(http, v2["mutation_id"], {"rolled_back"}, 60)
    assert done["restored_version"] == 1
    assert done["rollback_reason"] == f"not yours (by agent '{alice.agent_id}', owner of the replaced v1)"
    assert await live_version(http, name) == 1

    # The operator may roll back anyone's mutation.
    by_operator = await http.post(f"/api/mutations/{v1['mutation_id']}/rollback", headers=operator.headers)
    assert by_operator.status_code == 202, by_operator.text
    done = await wait_for_status(http, v1["mutation_id"], {"rolled_back"}, 60)
    assert done["rollback_reason"] == f"manual (by operator '{operator.name}')"
    assert await live_version(http, name) is None


async def test_rolling_back_a_replaced_version_says_what_is_live(client):
    http = client
    alice = await agents.register(http, "alice-two-versions")
    name = fresh_name("stacked")
    v1 = await go_live(http, alice, name)
    v2 = await go_live(http, alice, name, replaces={"trait_name": name, "version": 1})
    response = await http.post(f"/api/mutations/{v1['mutation_id']}/rollback", headers=alice.headers)
    assert response.status_code == 202, response.text
    message = response.json()["message"]
    assert f"v2 (mutation {v2['mutation_id']}) is live" in message
    assert f"roll back {v2['mutation_id']} to take the live version out" in message
    await wait_for_status(http, v1["mutation_id"], {"rolled_back"}, 60)
    assert await live_version(http, name) == 2
    await http.post(f"/api/mutations/{v2['mutation_id']}/rollback", headers=alice.headers)
    await wait_for_status(http, v2["mutation_id"], {"rolled_back"}, 60)
    assert await live_version(http, name) is None  # v1 was rolled back: nothing to restore
