"""Nobody takes over another agent's trait: a replacement by anyone but the owner of the live
version is 403 (single and batch propose, with replaces and under the permissive policy); an
operator may replace it; the owner of the replaced version may roll the replacement back, and v1
is live again; a rollback of a version that is not live says so; and activation checks the owner
again, so a version that went live after the proposal was checked is not taken over."""

from __future__ import annotations

import httpx
import pytest

from cli.processes import worker_process
from tests import agents
from tests.pipeline_steps import replay_and_maybe_record, wait_for_status
from tests.trait_versions import code, fresh_name, go_live, propose

# Proposals made through an API on this queue wait until a test starts a worker that polls it.
HELD = "genesis-test-ownership-held"


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
    batch = await http.post(
        "/api/mutations/propose/batch",
        headers=bob.headers,
        json={"proposals": [{"trait_name": name, "goal": "g", "code": code(), "replaces": {"trait_name": name}}]},
    )
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
    response = await http.post(
        "/api/mutations/propose",
        headers={**bob.headers, **operator.headers},
        json={
            "trait_name": name,
            "goal": "operator-approved takeover",
            "code": code(),
            "replaces": {"trait_name": name, "version": 1},
        },
    )
    assert response.status_code == 202, response.text
    v2 = await wait_for_status(http, response.json()["mutation_id"], {"activated", "rejected", "failed"}, 90)
    assert v2["status"] == "activated" and v2["agent_id"] == bob.agent_id and v2["replaced_version"] == 1

    refused = await http.post(f"/api/mutations/{v2['mutation_id']}/rollback", headers=carol.headers)
    assert refused.status_code == 403 and refused.json()["error"] == "NOT_YOUR_MUTATION", refused.text
    assert "or the agent whose version it replaced" in refused.json()["detail"]

    rolled = await http.post(
        f"/api/mutations/{v2['mutation_id']}/rollback", json={"reason": "not yours"}, headers=alice.headers
    )
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


async def test_ownership_is_checked_again_at_activation(client, start_api, settings, temporal_client):
    """Alice's proposals that replace whatever is live pass the owner check while her v1 is live
    and then wait (no worker polls their task queue). Alice's v1 goes out and Bob's new trait of
    that name goes live as v2. When a worker takes the proposals up, activation finds another
    agent's version live: Alice's (with ``replaces`` without a version, and one under the
    permissive policy without ``replaces``) end rejected NOT_TRAIT_OWNER and nothing of hers
    goes live; Carol's, approved by an operator when she proposed it, replaces v2."""
    http = client
    alice, bob, carol = [await agents.register(http, n) for n in ("alice-early", "bob-later", "carol-approved")]
    operator = await agents.operator(settings)
    name = fresh_name("contested")
    v1 = await go_live(http, alice, name)

    held = await start_api("api-ownership-held", task_queue=HELD, observation_window_ticks=1_000_000_000)
    held_permissive = await start_api(
        "api-ownership-held-replace",
        task_queue=HELD,
        trait_exists_policy="replace",
        observation_window_ticks=1_000_000_000,
    )
    async with (
        httpx.AsyncClient(base_url=held, timeout=30) as queued,
        httpx.AsyncClient(base_url=held_permissive, timeout=30) as queued_permissive,
    ):
        responses = [
            await propose(queued, alice, name, code(), {"trait_name": name}),
            await propose(queued_permissive, alice, name, code()),
            await queued.post(
                "/api/mutations/propose",
                headers={**carol.headers, **operator.headers},
                json={
                    "trait_name": name,
                    "goal": "approved takeover",
                    "code": code(),
                    "replaces": {"trait_name": name},
                },
            ),
        ]
    assert [r.status_code for r in responses] == [202, 202, 202], [r.text for r in responses]
    with_replaces, implicit, approved = [r.json()["mutation_id"] for r in responses]
    recorded = {i: (await http.get(f"/api/mutations/{i}/status")).json() for i in (with_replaces, implicit, approved)}
    assert [recorded[i]["status"] for i in recorded] == ["queued"] * 3
    assert recorded[approved]["replacement_approved_by"] == f"operator '{operator.name}'"
    assert recorded[with_replaces]["replacement_approved_by"] is None
    assert recorded[implicit]["replacement_approved_by"] is None

    assert (await http.post(f"/api/mutations/{v1['mutation_id']}/rollback", headers=alice.headers)).status_code == 202
    await wait_for_status(http, v1["mutation_id"], {"rolled_back"}, 60)
    v2 = await go_live(http, bob, name)
    assert v2["trait_version"] == 2 and v2["replaced_version"] is None

    worker = worker_process(settings.model_copy(update={"task_queue": HELD}), "worker-ownership-held")
    worker.start()
    try:
        finals = {
            i: await wait_for_status(http, i, {"activated", "rejected", "failed"}, 180)
            for i in (with_replaces, implicit, approved)
        }
        taken = finals[approved]
        assert taken["status"] == "activated", taken
        assert taken["trait_version"] == 3 and taken["replaced_version"] == 2
        # Carol's v3 may have gone live before or after Alice's proposals were refused: neither is hers.
        live_then = {2: (v2["mutation_id"], bob.agent_id), 3: (approved, carol.agent_id)}
        for mutation_id in (with_replaces, implicit):
            refused = finals[mutation_id]
            assert refused["status"] == "rejected" and refused["failure_reason_code"] == "NOT_TRAIT_OWNER", refused
            assert refused["trait_version"] is None and refused["replaced_version"] is None
            assert any(line.startswith("Sandbox: OK") for line in refused["validation_log"]), "it passed its sandbox"
            last = refused["validation_log"][-1]
            assert last.startswith(f"Activation: FAILED — NOT_TRAIT_OWNER: trait '{name}' is live as v"), last
            version = int(last.split(" is live as v", 1)[1].split(" ", 1)[0])
            owner_mutation, owner = live_then[version]
            assert f"(mutation {owner_mutation}), made by agent '{owner}', not by '{alice.agent_id}'" in last, last
            assert "nothing was activated" in last and "an operator may approve the replacement" in last, last

        detail = (await http.get(f"/api/traits/{name}")).json()
        assert detail["live_version"] == 3 and detail["live"]["agent_id"] == carol.agent_id
        assert [(v["version"], v["status"], v["agent_id"]) for v in detail["versions"]] == [
            (3, "active", carol.agent_id),
            (2, "superseded", bob.agent_id),
            (1, "rolled_back", alice.agent_id),
        ]
        await replay_and_maybe_record(temporal_client, with_replaces, "mutation_not_trait_owner")
        await http.post(f"/api/mutations/{approved}/rollback", headers=operator.headers)
        assert (await wait_for_status(http, approved, {"rolled_back"}, 60))["restored_version"] == 2
    finally:
        worker.stop()
