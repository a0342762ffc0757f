"""The policy gate on real services: registered agents hold the manifest's default capabilities;
a revoked grant, or a manifest with no rule that allows, denies a proposal with a recorded decision
and no effect; dry-run rules are recorded and change nothing; the simulator decides without
recording; every decision reaches the world's journal and its audit."""

from __future__ import annotations

import asyncio
import time

import pytest
from sqlalchemy import func, select
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from audit import projection
from engine.process.main import keep_the_record
from genesis import canonical, signing
from genesis.db.models import Mutation, PolicyDecisionRow
from governance import manifest as rules
from governance.records import manifests
from tests import agents, traits
from tests.journal_worlds import journal_settings, journaled_engine

DEFAULTS = ["actions.submit", "rules.propose", "traits.modify", "traits.propose"]


@pytest.fixture
async def database(settings):
    engine = create_async_engine(settings.database_url, poolclass=NullPool)
    yield engine
    await engine.dispose()


async def propose(http, agent, name: str):
    body = {"trait_name": name, "goal": "policy gate", "code": traits.unique_seeker()}
    return await http.post("/api/mutations/propose", json=body, headers=agent.headers)


async def mutations_of(database, agent_id: str) -> int:
    async with database.connect() as conn:
        return await conn.scalar(select(func.count()).select_from(Mutation).where(Mutation.agent_id == agent_id))


async def decisions_of(operator_http, agent_id: str) -> list[dict]:
    answer = await operator_http.get("/v1/policy/decisions", params={"subject": agent_id})
    assert answer.status_code == 200, answer.text
    return answer.json()["decisions"]


class InForce:
    """Put a manifest in force for a test, and the one before it back afterwards."""

    def __init__(self, database, settings, change) -> None:
        self.database, self.settings, self.change = database, settings, change

    async def __aenter__(self):
        async with self.database.begin() as conn:
            self.before = await manifests.current(conn, self.settings)
            document = self.change(dict(self.before.document))
            self.now = await manifests.record(conn, document, "test", self.before.hash)
        return self.now

    async def __aexit__(self, *exc) -> None:
        async with self.database.begin() as conn:
            await manifests.record(conn, self.before.document, "test: restored", self.now.hash)


async def test_an_agent_holds_the_default_capabilities_and_sees_only_its_own(http, operator_http):
    me = await agents.register(http, "caps-me")
    other = await agents.register(http, "caps-other")
    mine = await http.get(f"/v1/agents/{me.agent_id}/capabilities", headers=me.headers)
    assert mine.status_code == 200, mine.text
    assert mine.json()["live"] == DEFAULTS
    assert {g["granted_by"] for g in mine.json()["grants"]} == {"registration"}
    theirs = await http.get(f"/v1/agents/{me.agent_id}/capabilities", headers=other.headers)
    assert theirs.status_code == 403 and theirs.json()["error"] == "NOT_YOUR_AGENT"
    assert (await operator_http.get(f"/v1/agents/{me.agent_id}/capabilities")).json()["live"] == DEFAULTS
    missing = await operator_http.get("/v1/agents/agt_nobody/capabilities")
    assert missing.status_code == 404 and missing.json()["error"] == "AGENT_NOT_FOUND"
    # an agent's key cannot grant itself anything
    grab = await http.post(
        f"/v1/agents/{me.agent_id}/capabilities", json={"capabilities": ["traits.propose"]}, headers=me.headers
    )
    assert grab.status_code == 403 and grab.json()["error"] == "OPERATOR_KEY_REQUIRED"


async def test_a_revoked_capability_denies_with_a_recorded_decision_and_no_effect(http, operator_http, database):
    me = await agents.register(http, "caps-revoked")
    revoked = await operator_http.delete(f"/v1/agents/{me.agent_id}/capabilities/traits.propose")
    assert revoked.status_code == 200 and revoked.json()["revoked"] == 1, revoked.text

    denied = await propose(http, me, "gate_revoked")
    assert denied.status_code == 403, denied.text
    body = denied.json()
    assert body["error"] == "POLICY_DENIED" and body["rule"] == "capability"
    assert "no live grant of traits.propose" in body["detail"] and body["decision_id"] in body["detail"]
    assert await mutations_of(database, me.agent_id) == 0  # no effect
    (record,) = await decisions_of(operator_http, me.agent_id)
    assert (record["id"], record["decision"], record["action"], record["rule"]) == (
        body["decision_id"],
        "deny",
        "traits.propose",
        "capability",
    )
    assert record["resource"] == "trait:gate_revoked"

    granted = await operator_http.post(
        f"/v1/agents/{me.agent_id}/capabilities", json={"capabilities": ["traits.propose"], "ttl_sec": 3600}
    )
    assert granted.status_code == 201 and "traits.propose" in granted.json()["live"], granted.text
    assert any(g["expires_at"] for g in granted.json()["grants"] if g["capability"] == "traits.propose" and g["live"])
    accepted = await propose(http, me, "gate_revoked")
    assert accepted.status_code == 202, accepted.text
    allowed = await decisions_of(operator_http, me.agent_id)
    assert [d["decision"] for d in allowed] == ["allow", "deny"] and allowed[0]["rule"] == "agents-act"


async def test_default_deny_when_no_rule_allows(http, operator_http, database, settings):
    me = await agents.register(http, "caps-default-deny")

    def no_rules(document):
        return {**document, "policy": {"rules": []}}

    async with InForce(database, settings, no_rules) as now:
        shown = (await http.get("/v1/manifest")).json()
        assert (shown["version"], shown["hash"], shown["document"]["policy"]["rules"]) == (now.version, now.hash, [])
        denied = await propose(http, me, "gate_default_deny")
        assert denied.status_code == 403 and denied.json()["rule"] == "default-deny", denied.text
        assert "default deny" in denied.json()["detail"]
    assert await mutations_of(database, me.agent_id) == 0
    (record,) = await decisions_of(operator_http, me.agent_id)
    assert record["manifest_hash"] == now.hash and record["reason"].startswith("no rule in force allows")
    history = (await http.get("/v1/manifest/history")).json()["versions"]
    assert [v["cause"] for v in history[:2]] == ["test: restored", "test"]
    assert (await propose(http, me, "gate_default_deny")).status_code == 202  # the rules are back


async def test_a_dry_run_rule_is_recorded_and_changes_nothing(http, operator_http, database, settings):
    me = await agents.register(http, "caps-dry-run")
    trial = {"id": "try-closing", "decision": "deny", "actions": ["traits.propose"], "mode": "dry_run"}

    def with_trial(document):
        return {**document, "policy": {"rules": [trial, *document["policy"]["rules"]]}}

    async with InForce(database, settings, with_trial):
        assert (await propose(http, me, "gate_dry_run")).status_code == 202
    (record,) = await decisions_of(operator_http, me.agent_id)
    assert record["decision"] == "allow" and record["dry_run"] == [{"rule": "try-closing", "decision": "deny"}]


async def test_the_simulator_decides_without_recording(http, operator_http):
    me = await agents.register(http, "caps-simulated")
    ask = {"role": "agent", "action": "traits.propose", "agent_id": me.agent_id}
    now = (await http.get("/v1/manifest")).json()
    allowed = await operator_http.post("/v1/policy/simulate", json=ask)
    assert allowed.status_code == 200, allowed.text
    assert allowed.json() | {"capabilities": None} == {
        "decision": "allow",
        "rule": "agents-act",
        "reason": "rule agents-act allows traits.propose",
        "manifest_hash": now["hash"],
        "dry_run": [],
        "capabilities": None,
    }
    assert allowed.json()["capabilities"] == DEFAULTS
    candidate = {**now["document"], "policy": {"rules": []}}
    denied = (await operator_http.post("/v1/policy/simulate", json={**ask, "document": candidate})).json()
    assert (denied["decision"], denied["rule"]) == ("deny", "default-deny")
    assert denied["manifest_hash"] == rules.manifest_hash(rules.normalized(candidate))
    bare = (await operator_http.post("/v1/policy/simulate", json={**ask, "capabilities": []})).json()
    assert (bare["decision"], bare["rule"]) == ("deny", "capability")
    approve = (await operator_http.post("/v1/policy/simulate", json={**ask, "action": "mutations.approve"})).json()
    assert approve["rule"] == "operator-only"
    bad = await operator_http.post("/v1/policy/simulate", json={**ask, "document": {"policy": {"rules": "all"}}})
    assert bad.status_code == 422 and "body.document" in bad.text and "/policy/rules" in bad.text
    assert await decisions_of(operator_http, me.agent_id) == []


async def test_decisions_reach_the_journal_and_its_audit(http, operator_http, settings, tmp_path, redis_client):
    me = await agents.register(http, "caps-journaled")
    await operator_http.delete(f"/v1/agents/{me.agent_id}/capabilities/traits.propose")
    denied = (await propose(http, me, "gate_journaled")).json()
    engine = journaled_engine(journal_settings(tmp_path, 4))
    keys_dir = tmp_path / "keys"
    record_settings = journal_settings(tmp_path, 4).override(
        database_url=settings.database_url, receipt_keys_dir=keys_dir
    )
    sessions = async_sessionmaker(
        create_async_engine(settings.database_url, poolclass=NullPool), expire_on_commit=False
    )
    stop = asyncio.Event()
    try:
        await engine.run_ticks(20)
        keeping = asyncio.create_task(
            keep_the_record(record_settings, engine, signing.ensure_keyring(keys_dir), redis_client, stop)
        )
        deadline = time.monotonic() + 30
        while True:
            async with sessions() as session:
                row = await session.get(PolicyDecisionRow, denied["decision_id"])
            if row.journal_seq is not None or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.2)
        stop.set()
        await keeping
    finally:
        await engine.close()
        engine.journal.close()
    assert row.journal_seq is not None, "the decision never reached the journal"
    assert canonical.decode(row.body)["decision"]["rule"] == "capability"
    await projection.rebuild(sessions, tmp_path)
    events = (
        await operator_http.get("/v1/audit/events", params={"kind": "policy.decision", "agent_id": me.agent_id})
    ).json()
    (event,) = events["events"]
    assert event["seq"] == row.journal_seq and event["cause"] == "deny"
    assert event["summary"]["decision_id"] == denied["decision_id"] and event["summary"]["action"] == "traits.propose"
