"""Webhooks and batch propose over HTTP against the real API, worker, Temporal and Postgres.

A real local HTTP receiver gets the signed callbacks and verifies them with the Standard
Webhooks reference library and by hand (the recipe of docs/api.md); a receiver that is down does
not hold the mutation up, and the retries reach it once it is back."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import hmac
import json
import random
import socket
import time
import uuid

import httpx
import pytest
from standardwebhooks import Webhook, WebhookVerificationError
from temporalio.client import WorkflowExecutionStatus

from cli.processes import free_port
from genesis import netpolicy
from pipeline import webhooks
from tests import agents, traits
from tests.pipeline_steps import replay_and_maybe_record, sample, signal_window, wait_for_status, wait_for_verdict
from tests.webhook_receiver import Receiver


def forbidden(variant: str) -> str:
    """Rejected by the gatekeeper at once (no sandbox): cheap proposals for limits and batches."""
    return (
        f"import os\n\nclass BaseTrait:\n    pass\n\nclass T{variant}(BaseTrait):\n"
        "    async def execute(self, entity) -> None:\n        pass\n"
    )


@pytest.fixture
def receiver():
    server = Receiver()
    yield server
    server.close()


def verify_by_hand(secret: str, headers: dict[str, str], body: bytes) -> None:
    """The recipe of docs/api.md, without any library."""
    key = base64.b64decode(secret.removeprefix("whsec_"))
    signed = f"{headers['webhook-id']}.{headers['webhook-timestamp']}.".encode() + body
    expected = base64.b64encode(hmac.new(key, signed, hashlib.sha256).digest()).decode()
    assert any(hmac.compare_digest(f"v1,{expected}", sig) for sig in headers["webhook-signature"].split(" "))
    assert abs(time.time() - int(headers["webhook-timestamp"])) < 300


async def webhook_secret(http, agent) -> str:
    response = await http.get("/v1/agents/me/webhook-secret", headers=agent.headers)
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["agent_id"] == agent.agent_id and body["webhook_secret"].startswith("whsec_")
    return body["webhook_secret"]


async def propose_as(http, agent, code: str, trait_name: str, **extra) -> str:
    response = await http.post(
        "/api/mutations/propose",
        headers=agent.headers,
        json={"trait_name": trait_name, "goal": "webhook test", "code": code, **extra},
    )
    assert response.status_code == 202, response.text
    return response.json()["mutation_id"]


async def test_signed_callback_on_each_status_change(http, receiver, temporal_client, settings):
    agent = await agents.register(http, "webhook-receiver-agent")
    secret = await webhook_secret(http, agent)
    mutation_id = await propose_as(
        http, agent, traits.seeker(7300 + random.randrange(500)), "webhook_seeker", notify_url=receiver.url
    )
    # Webhook URLs often carry a token: shown to the proposing agent and operators only.
    path = f"/api/mutations/{mutation_id}/status"
    assert (await http.get(path, headers=agent.headers)).json()["notify_url"] == receiver.url
    assert (await http.get(path, headers=await agents.operator_headers(settings))).json()["notify_url"] == receiver.url
    stranger = await agents.register(http, "webhook-stranger")
    assert (await http.get(path)).json()["notify_url"] is None
    assert (await http.get(path, headers=stranger.headers)).json()["notify_url"] is None
    listed = (await http.get("/api/mutations", params={"agent_id": agent.agent_id})).json()["mutations"]
    assert [m["notify_url"] for m in listed if m["mutation_id"] == mutation_id] == [None]
    mine = (await http.get("/api/mutations", params={"agent_id": agent.agent_id}, headers=agent.headers)).json()
    assert [m["notify_url"] for m in mine["mutations"] if m["mutation_id"] == mutation_id] == [receiver.url]
    forged = await http.get(path, headers={"X-API-Key": "gk_live_" + "0" * 40})
    assert forged.status_code == 401 and forged.json()["error"] == "INVALID_API_KEY"
    await wait_for_status(http, mutation_id, {"activated"}, timeout_s=120)
    await receiver.wait_for(mutation_id, "activated")
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "webhook test"}, headers=agent.headers
    )
    assert response.status_code == 202, response.text
    events = await receiver.wait_for(mutation_id, "rolled_back")
    await temporal_client.get_workflow_handle(f"mutation-{mutation_id}").result()

    assert [e["status"] for e in events] == ["validating", "sandbox_ok", "activated", "rolled_back"]
    assert [e["previous_status"] for e in events] == ["queued", "validating", "sandbox_ok", "activated"]
    assert [e["sequence"] for e in events] == [1, 2, 3, 4]
    assert all(
        e["event"] == "MutationStatusChanged"
        and e["agent_id"] == agent.agent_id
        and e["trait_name"] == "webhook_seeker"
        and e["status_url"] == f"/api/mutations/{mutation_id}/status"
        for e in events
    )
    assert events[2]["trait_version"] >= 1 and events[3]["rollback_reason"] == "webhook test"
    calls = [(h, b) for h, b in receiver.calls if json.loads(b)["mutation_id"] == mutation_id]
    assert len({h["webhook-id"] for h, _ in calls}) == 4
    for headers, body in calls:
        assert headers["content-type"] == "application/json" and headers["x-genesis-attempt"] == "1"
        assert Webhook(secret).verify(body, headers) == json.loads(body)  # the reference library
        verify_by_hand(secret, headers, body)
    # A signature made with another agent's secret does not verify.
    other = webhooks.agent_secret(b"genesis-test-webhook-secret", "agt_someone_else")
    with pytest.raises(WebhookVerificationError):
        Webhook(other).verify(calls[0][1], calls[0][0])
    await replay_and_maybe_record(temporal_client, mutation_id, "mutation_webhook_rolled_back")


async def test_kept_then_rolled_back_over_the_api_notifies_too(http, receiver, temporal_client):
    """kept → rolled_back happens in a RollbackWorkflow (the mutation's workflow has ended)."""
    agent = await agents.register(http, "webhook-keeper-agent")
    secret = await webhook_secret(http, agent)
    mutation_id = await propose_as(
        http, agent, traits.seeker(7900 + random.randrange(300)), "webhook_keeper", notify_url=receiver.url
    )
    await wait_for_status(http, mutation_id, {"activated"}, timeout_s=120)
    await signal_window(temporal_client, mutation_id, sample(300, 100, 50.0, 5), sample(600, 110, 55.0, 2))
    await receiver.wait_for(mutation_id, "kept")
    response = await http.post(
        f"/api/mutations/{mutation_id}/rollback", json={"reason": "after kept"}, headers=agent.headers
    )
    assert response.status_code == 202, response.text
    events = await receiver.wait_for(mutation_id, "rolled_back")
    assert [e["status"] for e in events] == ["validating", "sandbox_ok", "activated", "kept", "rolled_back"]
    assert [e["sequence"] for e in events] == [1, 2, 3, 4, 5]
    assert events[3]["fitness_verdict"] == "positive"
    assert events[4]["previous_status"] == "kept" and events[4]["rollback_reason"] == "after kept"
    for headers, body in receiver.calls:
        Webhook(secret).verify(body, headers)


async def test_an_inconclusive_verdict_is_notified_as_inconclusive(http, receiver, temporal_client):
    """Kept because too few Molbots carried it to judge it: the callback says so, with the reason."""
    agent = await agents.register(http, "webhook-inconclusive-agent")
    mutation_id = await propose_as(
        http, agent, traits.seeker(8300 + random.randrange(300)), "webhook_uncarried", notify_url=receiver.url
    )
    await wait_for_status(http, mutation_id, {"activated"}, timeout_s=120)
    window = (sample(300, 100, 50.0, 5, carriers=1), sample(600, 110, 55.0, 2, carriers=1))  # the world did well
    await signal_window(temporal_client, mutation_id, *window)
    events = await receiver.wait_for(mutation_id, "kept")
    [kept] = [e for e in events if e["status"] == "kept"]
    assert kept["fitness_verdict"] == "inconclusive", kept
    assert kept["verdict_reason"].startswith("too few carriers to judge: 1 Molbot carried it"), kept
    assert "inconclusive" in kept["message"] and "positive" not in json.dumps(kept), kept
    response = await http.post(f"/api/mutations/{mutation_id}/rollback", json={"reason": "done"}, headers=agent.headers)
    assert response.status_code == 202, response.text


async def test_receiver_down_the_mutation_completes_and_retries_reach_it_later(http, temporal_client):
    agent = await agents.register(http, "webhook-down-agent")
    secret = await webhook_secret(http, agent)
    port = free_port()  # nothing listens here yet: connection refused
    mutation_id = await propose_as(
        http, agent, forbidden(uuid.uuid4().hex[:6]), "webhook_down", notify_url=f"http://127.0.0.1:{port}/hook"
    )
    status = await wait_for_verdict(http, mutation_id, timeout_s=60)
    assert status["status"] == "rejected" and status["failure_reason_code"] == "AST_IMPORT_FORBIDDEN"

    # The record is final while the workflow keeps retrying the first delivery.
    handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
    deadline = time.monotonic() + 30
    while True:
        description = await handle.describe()
        pending = description.raw_description.pending_activities
        if pending and pending[0].attempt >= 3:
            break
        assert time.monotonic() < deadline, f"no retries visible: {pending}"
        await asyncio.sleep(0.2)
    assert description.status == WorkflowExecutionStatus.RUNNING
    assert pending[0].activity_type.name == "deliver_webhook"
    assert "ConnectError" in pending[0].last_failure.message

    server = Receiver(port=port)  # the receiver comes back
    try:
        events = await server.wait_for(mutation_id, "rejected", timeout_s=30)
        await asyncio.wait_for(handle.result(), 30)
        assert [e["status"] for e in events] == ["validating", "rejected"]
        assert events[1]["failure_reason_code"] == "AST_IMPORT_FORBIDDEN"
        first_headers, first_body = server.calls[0]
        assert int(first_headers["x-genesis-attempt"]) >= 3  # delivered by a retry
        assert first_headers["webhook-id"] == f"{mutation_id}.1"
        Webhook(secret).verify(first_body, first_headers)
    finally:
        server.close()


@pytest.mark.parametrize(
    "url, problem",
    [
        ("ftp://127.0.0.1/x", "http:// or https://"),
        ("http:///nohost", "no host"),
        ("http://user:pw@127.0.0.1/", "credentials"),
        ("http://127.0.0.1:99999/", "not a valid URL"),
        ("http://127.0.0.1/" + "a" * 2048, "at most 2048"),
    ],
)
async def test_notify_url_must_be_a_plain_http_url(http, url, problem):
    agent = await agents.agent(http)
    response = await http.post(
        "/api/mutations/propose",
        headers=agent.headers,
        json={"trait_name": "bad_hook", "code": forbidden("x"), "notify_url": url},
    )
    assert response.status_code == 422, response.text
    body = response.json()
    assert body["error"] == "VALIDATION_ERROR" and body["errors"][0]["field"] == "notify_url"
    assert problem in body["detail"]


async def test_private_receivers_are_refused_by_default(start_api):
    """Every spelling of a private receiver is refused at propose time, with the address it
    stands for and why; the operator's allow-list opens one host:port and nothing else."""
    api = await start_api("api-webhook-policy", webhook_allow_private=False, outbound_private_allow="127.0.0.1:8099")
    refused = {
        "http://127.0.0.1:8080/hook": "127.0.0.1 is a loopback address",
        "http://2130706433:8080/hook": "127.0.0.1 is a loopback address",
        "http://127.1/hook": "127.0.0.1 is a loopback address",
        "http://0x7f.1/hook": "127.0.0.1 is a loopback address",
        "http://0177.0.0.1/hook": "127.0.0.1 is a loopback address",
        "http://0x7f000001/hook": "127.0.0.1 is a loopback address",
        "http://127.0.0.1./hook": "127.0.0.1 is a loopback address",
        "http://localhost/hook": "localhost is a loopback name",
        "https://[::1]/hook": "::1 is a loopback address",
        "http://[::ffff:127.0.0.1]/": "stands for 127.0.0.1",
        "http://10.1.2.3/hook": "10.1.2.3 is a private address",
        "http://0/hook": "0.0.0.0 is the unspecified address",
        "http://169.254.169.254/latest": "169.254.169.254 is a cloud metadata address",
        "http://[fd00:ec2::254]/latest": "fd00:ec2::254 is a cloud metadata address",
        "http://100.64.0.1/hook": "shared (carrier-grade NAT)",
        "http://[fe80::1]/hook": "fe80::1 is a link-local address",
        "http://127.0.0.1:8098/hook": "127.0.0.1 is a loopback address",  # the allowed host, another port
    }
    async with httpx.AsyncClient(base_url=api, timeout=30) as client:
        agent = await agents.register(client, "webhook-policy-agent")
        for url, why in refused.items():
            response = await client.post(
                "/api/mutations/propose",
                headers=agent.headers,
                json={"trait_name": "private_hook", "code": forbidden("p"), "notify_url": url},
            )
            assert response.status_code == 422, (url, response.text)
            body = response.json()
            assert body["errors"][0]["field"] == "notify_url", url
            assert why in body["detail"], (url, body["detail"])
            assert (
                "GENESIS_WEBHOOK_ALLOW_PRIVATE" in body["detail"] and "GENESIS_OUTBOUND_PRIVATE_ALLOW" in body["detail"]
            )
        allowed = await client.post(
            "/api/mutations/propose",
            headers=agent.headers,
            json={"trait_name": "private_hook", "code": forbidden("p"), "notify_url": "http://127.0.0.1:8099/hook"},
        )
        assert allowed.status_code == 202, allowed.text


def test_url_form():
    assert webhooks.url_problem("https://hooks.example.com/genesis") is None
    assert webhooks.url_problem("http://8.8.8.8/x") is None
    assert "http:// or https://" in webhooks.url_problem("gopher://8.8.8.8/x")


async def test_names_resolving_to_private_addresses_are_refused_at_delivery():
    policy = netpolicy.NetPolicy()
    with pytest.raises(netpolicy.Refused, match="localhost is a loopback name"):
        await webhooks.receiver("http://localhost:1/x", policy)
    hostname = socket.gethostname()  # where it resolves, it is one of this machine's own addresses
    with contextlib.suppress(OSError):
        socket.getaddrinfo(hostname, 1)
        with pytest.raises(netpolicy.Refused, match=rf"notify_url host {hostname} \(.+\) is "):
            await webhooks.receiver(f"http://{hostname}:1/x", policy)
    receiver = await webhooks.receiver("https://8.8.8.8/x", policy)
    assert webhooks.pinned_request("https://8.8.8.8/x", receiver) == ("https://8.8.8.8/x", {"Host": "8.8.8.8"}, {})


async def test_a_delivery_connects_to_the_address_that_was_checked():
    """The POST goes to the address the check resolved, never to a second lookup: here a name
    that only the check's resolver knows. The receiver sees its own name in the Host header."""
    server = Receiver(free_port())
    name = "receiver.genesis.invalid"
    url = f"http://{name}:{server.port}/hooks/genesis"
    try:
        policy = netpolicy.NetPolicy(allow_any=True, resolver=lambda host, port: ["127.0.0.1"])
        pinned, headers, extensions = webhooks.pinned_request(url, await webhooks.receiver(url, policy))
        assert pinned == f"http://127.0.0.1:{server.port}/hooks/genesis" and extensions == {}
        async with httpx.AsyncClient(trust_env=False) as client:
            response = await client.post(pinned, content=b"{}", headers=headers)
        assert response.status_code == 200
        assert server.calls[0][0]["host"] == f"{name}:{server.port}"
        secure = f"https://{name}/x"
        assert webhooks.pinned_request(secure, await webhooks.receiver(secure, policy)) == (
            "https://127.0.0.1/x",
            {"Host": name},
            {"sni_hostname": name},
        )
    finally:
        server.close()


async def test_batch_mixed_items_in_order(http):
    agent = await agents.register(http, "batch-agent")
    other = await agents.register(http, "batch-other")
    key = uuid.uuid4().hex
    valid = forbidden(uuid.uuid4().hex[:6])  # accepted by the API, rejected by the workflow
    good = traits.seeker(8300 + random.randrange(500))
    big_trait = traits.seeker(8900 + random.randrange(90))
    big = "#" * (32 * 1024 - len(big_trait) - 1) + "\n" + big_trait  # exactly 32 KB
    proposals = [
        {"trait_name": "batch_good", "code": good},
        {"trait_name": "Not-Snake", "code": valid},
        {"trait_name": "batch_rejected_later", "code": valid, "idempotency_key": key},
        {"trait_name": "batch_other", "code": valid, "agent_id": other.agent_id},
        "not an object",
        {"trait_name": "batch_hook", "code": valid, "notify_url": "gopher://x"},
        {"trait_name": "batch_rejected_later", "code": valid, "idempotency_key": key},  # the same again
        {"trait_name": "batch_big", "code": big},
    ]
    response = await http.post("/api/mutations/propose/batch", headers=agent.headers, json={"proposals": proposals})
    assert response.status_code == 207, response.text
    body = response.json()
    results = body["results"]
    assert [r["index"] for r in results] == list(range(len(proposals)))
    assert [r["status_code"] for r in results] == [202, 422, 202, 403, 422, 422, 202, 202]
    assert body["accepted"] == 4 and body["refused"] == 4
    assert results[1]["error"] == "VALIDATION_ERROR" and results[1]["errors"][0]["field"] == "trait_name"
    assert results[3]["error"] == "AGENT_ID_MISMATCH"
    assert results[4]["error"] == "VALIDATION_ERROR"
    assert results[5]["errors"][0]["field"] == "notify_url"
    assert results[6]["mutation_id"] == results[2]["mutation_id"]  # idempotent per item
    for index in (0, 2, 7):
        status = (await http.get(results[index]["status_url"])).json()
        assert status["agent_id"] == agent.agent_id and status["mutation_id"] == results[index]["mutation_id"]
    assert (await wait_for_verdict(http, results[2]["mutation_id"]))["failure_reason_code"] == "AST_IMPORT_FORBIDDEN"


async def test_batch_refusals_of_the_whole_request(http):
    agent = await agents.agent(http)
    item = {"trait_name": "batch_whole", "code": forbidden("w")}
    response = await http.post("/api/mutations/propose/batch", json={"proposals": [item]})
    assert response.status_code == 401 and response.json()["error"] == "API_KEY_REQUIRED"
    response = await http.post("/api/mutations/propose/batch", headers=agent.headers, json={"proposals": [item] * 11})
    assert response.status_code == 422 and response.json()["error"] == "BATCH_TOO_LARGE"
    assert "at most 10" in response.json()["detail"]
    response = await http.post("/api/mutations/propose/batch", headers=agent.headers, json={"proposals": []})
    assert response.status_code == 422 and response.json()["error"] == "VALIDATION_ERROR"
    response = await http.post("/api/mutations/propose/batch", headers=agent.headers, json=[item])
    assert response.status_code == 422
    huge = {"proposals": [{"trait_name": "t", "code": "x" * 30_000}] * 40}
    response = await http.post("/api/mutations/propose/batch", headers=agent.headers, json=huge)
    assert response.status_code == 413 and response.json()["error"] == "PAYLOAD_TOO_LARGE"


async def test_batch_items_are_rate_limited_as_if_proposed_alone(start_api, settings):
    api = await start_api("api-batch-limits", ratelimit_proposals_per_agent_hour=2)
    source = f"127.{random.randrange(1, 250)}.{random.randrange(1, 250)}.{random.randrange(2, 250)}"
    transport = httpx.AsyncHTTPTransport(local_address=source)
    async with httpx.AsyncClient(base_url=api, timeout=30, transport=transport) as client:
        agent = await agents.register(client, "batch-limited")
        proposals = [{"trait_name": f"limited_{i}", "code": forbidden(f"{uuid.uuid4().hex[:6]}")} for i in range(4)]
        response = await client.post(
            "/api/mutations/propose/batch", headers=agent.headers, json={"proposals": proposals}
        )
        assert response.status_code == 207, response.text
        results = response.json()["results"]
        assert [r["status_code"] for r in results] == [202, 202, 429, 429]
        for refused in results[2:]:
            assert refused["error"] == "RATE_LIMIT_EXCEEDED" and refused["retry_after_sec"] >= 1
            assert "this hour (limit: 2 per hour)" in refused["detail"] and "mutation_id" not in refused
        # A single proposal now is refused the same way: the batch used the same quota.
        single = await client.post("/api/mutations/propose", headers=agent.headers, json=proposals[0])
        assert single.status_code == 429
