"""Governed changes of the world's rules on real services: a proposal through the API, its
GovernanceWorkflow (real activities, in this process, on a journal of a real run) shadowing it
beside the baseline, waiting for an operator, and applying it only for the report that was
approved; rejection; the manifest moving under an approved proposal; expiry on its durable timer
(time-skipping); and an agent key that cannot approve."""

from __future__ import annotations

import asyncio
import time
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool
from temporalio.worker import Worker

from activities.governance import GovernanceActivities
from genesis import signing
from genesis.dto import GovernanceOutcome, GovernanceRequest
from genesis.workflow_api import GOVERNANCE_WORKFLOW, journal_task_queue
from governance import manifest as rules
from governance.records import manifests, proposals
from tests import agents
from tests.cli_runs import record_history
from tests.journal_worlds import journal_settings, run_journaled
from workflows.governance import GovernanceWorkflow

QUEUE = "genesis-test-governance"


@pytest.fixture(scope="module")
async def database(settings):
    engine = create_async_engine(settings.database_url, poolclass=NullPool)
    yield engine
    await engine.dispose()


@pytest.fixture(scope="module", autouse=True)
async def rules_restored(database, settings):
    """The manifest this module's proposals change is put back as it was for the modules after it."""
    async with database.begin() as conn:
        before = await manifests.current(conn, settings)
    yield
    async with database.begin() as conn:
        now = await manifests.current(conn, settings)
        if now.hash != before.hash:
            await manifests.record(conn, before.document, "test: restored", now.hash)


@pytest.fixture(scope="module")
async def journal(tmp_path_factory):
    path = tmp_path_factory.mktemp("governance-journal")
    await run_journaled(journal_settings(path, 17, journal_snapshot_interval=200), 800)
    return path


def activities_of(settings, journal, database, keys_dir):
    gov_settings = settings.override(journal_dir=journal, receipt_keys_dir=keys_dir)
    sessions = async_sessionmaker(database, expire_on_commit=False)
    return GovernanceActivities(gov_settings, sessions, signing.ensure_keyring(gov_settings.receipt_keys_path))


def workers(client, acts):
    return (
        Worker(
            client,
            task_queue=QUEUE,
            workflows=[GovernanceWorkflow],
            activities=[acts.decide_proposal, acts.apply_proposal],
        ),
        Worker(client, task_queue=journal_task_queue(QUEUE), activities=[acts.shadow_proposal]),
    )


@pytest.fixture(scope="module")
async def governance_api(settings, journal, database, start_api, temporal_client, tmp_path_factory):
    """An API whose governance workflows run on this module's queue, with their workers here."""
    acts = activities_of(settings, journal, database, tmp_path_factory.mktemp("gov-keys"))
    pipeline_worker, journal_worker = workers(temporal_client, acts)
    async with pipeline_worker, journal_worker:
        url = await start_api("governance", task_queue=QUEUE)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            yield http


async def current(http) -> dict:
    return (await http.get("/v1/manifest")).json()


async def wait_for(http, proposal_id: str, statuses: set[str], timeout_s: float = 90) -> dict:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        body = (await http.get(f"/v1/governance/proposals/{proposal_id}")).json()
        if body["status"] in statuses:
            return body
        await asyncio.sleep(0.2)
    raise AssertionError(f"{proposal_id} never reached {statuses}: {body}")


async def test_a_proposal_is_shadowed_waits_for_approval_of_its_report_and_is_applied(
    governance_api, settings, temporal_client
):
    http = governance_api
    operator = await agents.operator_headers(settings)
    me = await agents.register(http, "gov-proposer")
    base = await current(http)
    ops = [
        {"op": "test", "path": "/approvals/first_traits", "value": base["document"]["approvals"]["first_traits"]},
        {"op": "add", "path": "/params/resource_energy", "value": 45.0},
        {"op": "replace", "path": "/governance/shadow_ticks", "value": 300},
    ]
    answer = await http.post(
        "/v1/governance/proposals",
        json={"base_hash": base["hash"], "ops": ops, "reason": "richer food"},
        headers=me.headers,
    )
    assert answer.status_code == 202, answer.text
    pid = answer.json()["proposal_id"]
    waiting = await wait_for(http, pid, {"awaiting_approval", "failed"})
    assert waiting["status"] == "awaiting_approval", waiting
    report = waiting["report"]
    in_force = base["document"]["governance"]["shadow_ticks"]  # the length in force, not the candidate's
    assert in_force != 300 and report["ticks"] == in_force and report["recorded_ticks"] == in_force
    assert report["candidate"]["params"]["resource_energy"] == 45.0
    assert report["baseline"]["params"]["resource_energy"] != 45.0
    assert not report["differences"]["same_end_state"]
    assert {"op": "add", "path": "/params/resource_energy", "value": 45.0} in waiting["diff"]
    # it waits: nothing happens without a decision
    await asyncio.sleep(1.5)
    assert (await http.get(f"/v1/governance/proposals/{pid}")).json()["status"] == "awaiting_approval"
    # an agent's key cannot approve; an approval names the report it read
    refused = await http.post(
        f"/v1/governance/proposals/{pid}/approve", json={"report_hash": waiting["report_hash"]}, headers=me.headers
    )
    assert refused.status_code == 403 and refused.json()["error"] == "OPERATOR_KEY_REQUIRED"
    wrong = await http.post(
        f"/v1/governance/proposals/{pid}/approve", json={"report_hash": "ab" * 32}, headers=operator
    )
    assert wrong.status_code == 409 and wrong.json()["error"] == "REPORT_MISMATCH"
    approved = await http.post(
        f"/v1/governance/proposals/{pid}/approve", json={"report_hash": waiting["report_hash"]}, headers=operator
    )
    assert approved.status_code == 202, approved.text
    done = await wait_for(http, pid, {"applied", "failed"})
    assert done["status"] == "applied" and done["applied_version"] == base["version"] + 1
    now = await current(http)
    assert now["version"] == done["applied_version"] and now["hash"] == done["candidate_hash"]
    assert now["document"]["params"]["resource_energy"] == 45.0
    receipts = (await http.get("/v1/receipts", params={"agent_id": me.agent_id}, headers=me.headers)).json()["receipts"]
    kinds = [r["kind"] for r in receipts if r["subject"].get("proposal_id") == pid]
    assert kinds == ["governance.proposed", "governance.shadowed", "governance.approved", "governance.applied"]
    await record_history(temporal_client, proposals.workflow_id(pid), "governance_applied")


async def test_rejection_and_a_manifest_that_moved(governance_api, settings, database):
    http = governance_api
    operator = await agents.operator_headers(settings)
    base = await current(http)
    change = [{"op": "replace", "path": "/governance/shadow_ticks", "value": 120}]
    first = (
        await http.post(
            "/v1/governance/proposals", json={"base_hash": base["hash"], "ops": change, "reason": "a"}, headers=operator
        )
    ).json()
    second_ops = [*change, {"op": "replace", "path": "/rounds/ticks", "value": 240}]
    second = (
        await http.post(
            "/v1/governance/proposals",
            json={"base_hash": base["hash"], "ops": second_ops, "reason": "b"},
            headers=operator,
        )
    ).json()
    await wait_for(http, first["proposal_id"], {"awaiting_approval"})
    two = await wait_for(http, second["proposal_id"], {"awaiting_approval"})
    rejected = await http.post(
        f"/v1/governance/proposals/{first['proposal_id']}/reject", json={"reason": "no"}, headers=operator
    )
    assert rejected.status_code == 202
    assert (await wait_for(http, first["proposal_id"], {"rejected"}))["decision_reason"] == "no"
    # a rejection is a decision of the gate too, recorded like an approval
    label = f"operator '{(await agents.operator(settings)).name}'"
    decided = (await http.get("/v1/policy/decisions", params={"subject": label}, headers=operator)).json()
    mine = [
        (d["action"], d["decision"])
        for d in decided["decisions"]
        if d["resource"] == f"proposal:{first['proposal_id']}"
    ]
    assert ("rules.approve", "allow") in mine, decided
    # the manifest moves under the second one before it is approved: it is not applied
    async with database.begin() as conn:
        now = await manifests.current(conn, settings)
        moved = await manifests.record(conn, {**now.document, "rounds": {"ticks": 600}}, "test: moved", now.hash)
    await http.post(
        f"/v1/governance/proposals/{second['proposal_id']}/approve",
        json={"report_hash": two["report_hash"]},
        headers=operator,
    )
    failed = await wait_for(http, second["proposal_id"], {"failed", "applied"})
    assert failed["status"] == "failed" and "moved" in failed["failure"]
    assert (await current(http))["hash"] == moved.hash


async def test_bad_proposals_are_refused_with_the_reason(governance_api, settings):
    http = governance_api
    operator = await agents.operator_headers(settings)
    base = await current(http)
    cases = [
        ({"base_hash": "0" * 64, "ops": [{"op": "remove", "path": "/params"}], "reason": "x"}, 409, "MANIFEST_MOVED"),
        ({"base_hash": base["hash"], "ops": [{"op": "remove", "path": "/nope"}], "reason": "x"}, 422, "PATCH_INVALID"),
        (
            {"base_hash": base["hash"], "ops": [{"op": "add", "path": "/params/width", "value": 5}], "reason": "x"},
            422,
            "MANIFEST_INVALID",
        ),
        (
            {
                "base_hash": base["hash"],
                "ops": [{"op": "test", "path": "/rounds/ticks", "value": base["document"]["rounds"]["ticks"]}],
                "reason": "x",
            },
            422,
            "NO_CHANGE",
        ),
    ]
    for body, status, error in cases:
        answer = await http.post("/v1/governance/proposals", json=body, headers=operator)
        assert (answer.status_code, answer.json()["error"]) == (status, error), answer.text
    me = await agents.register(http, "gov-no-rights")
    await http.delete(f"/v1/agents/{me.agent_id}/capabilities/rules.propose", headers=operator)
    change = [{"op": "replace", "path": "/governance/shadow_ticks", "value": 130}]
    denied = await http.post(
        "/v1/governance/proposals", json={"base_hash": base["hash"], "ops": change, "reason": "x"}, headers=me.headers
    )
    assert denied.status_code == 403 and denied.json()["rule"] == "capability"
    recorded = (await http.get("/v1/policy/decisions", params={"subject": me.agent_id}, headers=operator)).json()
    assert [(d["action"], d["decision"]) for d in recorded["decisions"]] == [("rules.propose", "deny")]


async def test_an_agents_proposals_are_bounded_in_number_and_in_work(governance_api, settings):
    """A patch whose copies double the document is refused at the op that would pass the budget;
    an agent has two proposals undecided at most, and makes twelve an hour, refused ones too."""
    http = governance_api
    operator = await agents.operator_headers(settings)
    me = await agents.register(http, "gov-flooder")
    base = await current(http)

    async def propose(ops: list[dict]) -> httpx.Response:
        body = {"base_hash": base["hash"], "ops": ops, "reason": "flood"}
        return await http.post("/v1/governance/proposals", json=body, headers=me.headers)

    doubling = [{"op": "add", "path": "/policy/x", "value": {}}]
    doubling += [{"op": "copy", "from": "/policy", "path": f"/policy/x/c{i}"} for i in range(199)]
    refused = await propose(doubling)
    assert refused.status_code == 422 and refused.json()["error"] == "PATCH_INVALID", refused.text
    assert "would pass 65,536 bytes" in refused.json()["detail"]
    assert refused.json()["detail"].startswith("body.ops: op 8 (copy /policy/x/c7)")  # after a few doublings

    pending = []
    for ticks in (610, 620):
        made = await propose([{"op": "replace", "path": "/governance/shadow_ticks", "value": ticks}])
        assert made.status_code == 202, made.text
        pending.append(made.json()["proposal_id"])
    third = await propose([{"op": "replace", "path": "/governance/shadow_ticks", "value": 630}])
    assert third.status_code == 429 and third.json()["error"] == "TOO_MANY_PENDING_PROPOSALS", third.text
    assert (third.json()["pending"], third.json()["limit"]) == (2, 2)
    for pid in pending:  # decided: room again (the shadow may still run: reject once it waits)
        await wait_for(http, pid, {"awaiting_approval"})
        rejected = await http.post(f"/v1/governance/proposals/{pid}/reject", json={"reason": "flood"}, headers=operator)
        assert rejected.status_code == 202, rejected.text
        await wait_for(http, pid, {"rejected"})
    answers = [(await propose([{"op": "remove", "path": "/nope"}])).status_code for _ in range(8)]
    assert answers == [422] * 8  # 1 + 2 + 1 + 8: the hour's twelve are used
    limited = await propose([{"op": "replace", "path": "/governance/shadow_ticks", "value": 640}])
    assert limited.status_code == 429 and limited.json()["error"] == "RATE_LIMIT_EXCEEDED", limited.text
    assert int(limited.headers["Retry-After"]) > 0 and "rule proposals" in limited.json()["detail"]
    unlimited = await http.post(  # an operator is not limited
        "/v1/governance/proposals",
        json={"base_hash": base["hash"], "ops": [{"op": "remove", "path": "/nope"}], "reason": "x"},
        headers=operator,
    )
    assert unlimited.status_code == 422


async def test_an_undecided_proposal_expires_on_its_durable_timer(skipping_env, settings, journal, database, tmp_path):
    async with database.begin() as conn:
        now = await manifests.current(conn, settings)
        document = rules.normalized({**now.document, "governance": {**now.document["governance"], "shadow_ticks": 100}})
        pid = await proposals.create(
            conn,
            author="test",
            author_role="operator",
            reason="left alone",
            base_version=now.version,
            base_hash=now.hash,
            ops=[],
            document=document,
            candidate_hash=rules.manifest_hash(document),
            expires_at=datetime.now(UTC) + timedelta(days=1),
        )
    acts = activities_of(settings, journal, database, tmp_path / "keys")
    pipeline_worker, journal_worker = workers(skipping_env.client, acts)
    started = time.monotonic()
    async with pipeline_worker, journal_worker:
        handle = await skipping_env.client.start_workflow(
            GOVERNANCE_WORKFLOW,
            GovernanceRequest(proposal_id=pid, ttl_sec=86_400),
            id=proposals.workflow_id(pid),
            task_queue=QUEUE,
            result_type=GovernanceOutcome,
        )
        outcome = await asyncio.wait_for(handle.result(), 120)
    assert outcome.status == "expired" and outcome.report_hash
    assert time.monotonic() - started < 60  # a day of waiting, in seconds
    async with database.connect() as conn:
        assert (await proposals.get(conn, pid)).status == "expired"
