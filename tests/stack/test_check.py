"""Check before propose: ``POST /api/mutations/check`` and ``genesis check`` on the real API,
worker, gatekeeper, Docker sandbox, Postgres, Redis and Temporal.

A check answers what a proposal of the same code would get — the verdict, failure code,
validation log and sandbox report — and leaves nothing behind: no mutation row, nothing in the
mutation list or the registry, no search attribute a mutation search matches, no proposal quota
used. It has rate limits of its own, and reveals no more of other agents' code than propose does."""

from __future__ import annotations

import asyncio
import json
import re
import time
import uuid

import httpx
import pytest
from sqlalchemy import select

from genesis.db.models import Mutation
from genesis.db.session import get_sessionmaker
from genesis.redis_keys import REGISTRY_TRAITS, REGISTRY_VERSION, ratelimit_agent_hour, ratelimit_check_agent_minute
from pipeline import ratelimit
from tests import agents, traits
from tests.agents import client_from
from tests.cli_runs import invoke, record_history
from tests.example_traits import examples
from tests.pipeline_steps import wait_for_verdict
from tests.trait_versions import code, count_mutations, fresh_name, go_live, propose

UNPOLLED = "genesis-test-check-unpolled"
CHECK_FIELDS = {
    "verdict",
    "trait_name",
    "failure_reason_code",
    "validation_log",
    "sandbox_report",
    "code_hash",
    "workflow_id",
}


async def check(http, agent: agents.TestAgent | None, trait_name: str, source: str, **extra) -> httpx.Response:
    headers = agent.headers if agent is not None else {}
    return await http.post(
        "/api/mutations/check", json={"trait_name": trait_name, "code": source, **extra}, headers=headers
    )


async def checked(http, agent: agents.TestAgent, trait_name: str, source: str, **extra) -> dict:
    response = await check(http, agent, trait_name, source, **extra)
    assert response.status_code == 200, response.text
    answer = response.json()
    assert set(answer) == CHECK_FIELDS, answer
    assert answer["trait_name"] == trait_name and answer["workflow_id"].startswith("check-chk_"), answer
    return answer


def raising(tag: str) -> str:
    """A trait the gatekeeper passes that raises in its first execute() (its own code hash)."""
    return traits.RAISES.replace('"boom"', f'"boom {tag}"')


@pytest.fixture(scope="module")
async def no_activation_url(start_api) -> str:
    """Proposals made here end at sandbox_ok and keep their code hash (nothing goes live)."""
    return await start_api("api-check-no-activation", activate_mutations=False)


@pytest.fixture(scope="module")
async def limited_url(start_api) -> str:
    return await start_api("api-check-limits", ratelimit_checks_per_agent_minute=2, ratelimit_checks_per_ip_minute=3)


async def holders_of(settings, code_hash: str) -> list[str]:
    async with get_sessionmaker(settings.database_url)() as session:
        held = select(Mutation.mutation_id).where(Mutation.code_hash == code_hash, Mutation.holds_code_hash)
        return list((await session.scalars(held)).all())


async def test_good_examples_pass_with_a_sandbox_report_and_leave_nothing_behind(
    http, settings, redis_client, temporal_client
):
    agent = await agents.register(http, "check-examples")
    registry_before = (await redis_client.hgetall(REGISTRY_TRAITS), await redis_client.get(REGISTRY_VERSION))
    good = [example for example in examples() if example.failure_code is None]
    assert len(good) >= 3
    for example in good:
        answer = await checked(http, agent, example.trait_name, example.code)
        # Dedupe is part of the check: an earlier proposal of this file in the session would be named.
        assert await holders_of(settings, answer["code_hash"]) == [], (example.path.name, "proposed earlier")
        assert answer["verdict"] == "passed" and answer["failure_reason_code"] is None, answer
        log = answer["validation_log"]
        assert log[0] == "Schema: OK" and log[-2] == "Deduplication: OK", log
        assert re.match(r"Sandbox: OK — (\d+) ticks", log[-1]), log
        report = answer["sandbox_report"]
        assert report["verdict"] == "ok" and 50 <= report["ticks_run"] < 100 and report["calls"] > 0, report
        assert report["container_id"] and report["image"], report  # it ran in a container, not in the API
        warned = "".join(f"; WARNING: {w}" for w in report["warnings"])  # e.g. one that never acted here
        assert log[-1] == f"Sandbox: OK — {report['summary']}{warned}"

    # Nothing of it is a mutation: no row, nothing listed, no registry change, no proposal quota.
    assert await count_mutations(settings, agent.agent_id) == 0
    listed = await http.get("/api/mutations", params={"agent_id": agent.agent_id})
    assert listed.status_code == 200 and listed.json() == {"mutations": [], "next_cursor": None}
    assert (await http.get("/api/mutations", params={"trait_name": good[0].trait_name})).json()["mutations"] == []
    registry_after = (await redis_client.hgetall(REGISTRY_TRAITS), await redis_client.get(REGISTRY_VERSION))
    assert registry_after == registry_before
    assert not list(settings.mutations_dir.glob(f"trait_{good[0].trait_name}_v*.py"))
    assert await redis_client.exists(ratelimit_agent_hour(agent.agent_id)) == 0
    me = (await http.get("/v1/agents/me", headers=agent.headers)).json()
    assert me["reputation"]["proposed"] == 0 and me["rate_limits"]["proposals_this_hour"] == 0, me
    # The checks ran as workflows on the worker, under none of the attributes mutations are found by.
    found = [wf async for wf in temporal_client.list_workflows(f'GenesisAgentId = "{agent.agent_id}"')]
    assert found == []
    handle = temporal_client.get_workflow_handle(answer["workflow_id"])
    assert (await handle.describe()).workflow_type == "CheckWorkflow"
    await record_history(temporal_client, answer["workflow_id"], "check_passed")


async def test_rejected_examples_give_their_failure_code_and_log_line(http, temporal_client):
    agent = await agents.register(http, "check-rejected-examples")
    rejected = [example for example in examples() if example.failure_code is not None]
    assert len(rejected) >= 2
    for example in rejected:
        answer = await checked(http, agent, example.trait_name, example.code)
        assert answer["verdict"] == "rejected" and answer["failure_reason_code"] == example.failure_code, answer
        assert answer["sandbox_report"] is None, answer  # refused before anything ran
        failed = next(line for line in answer["validation_log"] if "FAILED" in line)
        assert failed == answer["validation_log"][-1]
        assert " ".join(failed.split()) in example.header, (failed, example.header)
    await record_history(temporal_client, answer["workflow_id"], "check_rejected")


REFUSED_ONLY = """class BaseTrait:
    pass

class Hurried(BaseTrait):
    async def execute(self, entity) -> None:
        entity.speed = "fast {tag}"
"""
IDLE = """class BaseTrait:
    pass

class Idle(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.energy < -{tag}:
            entity.speed = 1.0
"""


async def test_a_trait_whose_actions_are_all_refused_fails_and_one_that_never_acts_is_warned(http):
    """What a table row used to hide: every intent refused is a failure with the reasons; a
    passing trait that never acted passes with a warning in its log line."""
    agent = await agents.register(http, "check-intents")
    tag = uuid.uuid4().hex[:8]
    refused = await checked(http, agent, "hurried", REFUSED_ONLY.format(tag=tag))
    assert refused["verdict"] == "rejected" and refused["failure_reason_code"] == "SANDBOX_INTENTS_REFUSED", refused
    line = refused["validation_log"][-1]
    assert line.startswith("Sandbox: FAILED — SANDBOX_INTENTS_REFUSED: every one of its") and "bad_type" in line
    idle = await checked(http, agent, "idle", IDLE.format(tag=int(tag, 16)))
    assert idle["verdict"] == "passed", idle
    assert "WARNING: it never acted: no intent in" in idle["validation_log"][-1], idle["validation_log"]
    assert idle["sandbox_report"]["warnings"] and idle["sandbox_report"]["intents_applied"] == 0


async def test_a_trait_that_raises_fails_the_sandbox_as_its_proposal_does(no_activation_url):
    source = raising(uuid.uuid4().hex[:8])
    async with httpx.AsyncClient(base_url=no_activation_url, timeout=90) as http:
        agent = await agents.register(http, "check-raises")
        answer = await checked(http, agent, "exploder", source)
        assert answer["verdict"] == "rejected" and answer["failure_reason_code"] == "SANDBOX_EXCEPTION", answer
        assert answer["validation_log"][-2] == "Deduplication: OK"
        assert answer["validation_log"][-1].startswith("Sandbox: FAILED — SANDBOX_EXCEPTION: tick 0: execute() raised")
        assert "boom" in answer["sandbox_report"]["first_error"]

        response = await propose(http, agent, "exploder", source)
        assert response.status_code == 202, response.text
        status = await wait_for_verdict(http, response.json()["mutation_id"])
    assert status["status"] == "rejected" and status["failure_reason_code"] == answer["failure_reason_code"]
    assert status["validation_log"] == answer["validation_log"]
    for field in ("verdict", "summary", "first_error", "exceptions", "ticks_run", "state_hash"):
        assert status["sandbox_report"][field] == answer["sandbox_report"][field], field


async def test_duplicate_code_is_reported_as_propose_reports_it(no_activation_url):
    source = code()
    async with httpx.AsyncClient(base_url=no_activation_url, timeout=90) as http:
        owner, other = await agents.register(http, "check-dup-owner"), await agents.register(http, "check-dup-other")
        response = await propose(http, owner, fresh_name("dup_original"), source)
        assert response.status_code == 202, response.text
        original = await wait_for_verdict(http, response.json()["mutation_id"])
        assert original["status"] == "sandbox_ok", original  # it keeps its code hash

        answer = await checked(http, other, "dup_copy", source)
        assert answer["verdict"] == "rejected" and answer["failure_reason_code"] == "DUPLICATE_CODE", answer
        assert answer["sandbox_report"] is None and answer["code_hash"] == original["code_hash"]
        # The copy's proposal gets the same answer, word for word: a check reveals nothing more.
        response = await propose(http, other, "dup_copy", source)
        copied = await wait_for_verdict(http, response.json()["mutation_id"])
        assert (
            copied["failure_reason_code"] == "DUPLICATE_CODE" and copied["validation_log"] == answer["validation_log"]
        )
        assert original["mutation_id"] in answer["validation_log"][-1] and source not in json.dumps(answer)
        # The owner's own check names its own mutation too: the code is taken, whoever asks.
        own = await checked(http, owner, "dup_original_again", source)
        assert own["failure_reason_code"] == "DUPLICATE_CODE"


async def test_the_trait_checks_of_propose_apply_before_the_test(http):
    owner, other = await agents.register(http, "check-trait-owner"), await agents.register(http, "check-trait-other")
    name = fresh_name("check_owned")
    live = await go_live(http, owner, name)
    try:
        proposed, checked_ = await propose(http, owner, name, code()), await check(http, owner, name, code())
        assert proposed.status_code == checked_.status_code == 409, (proposed.text, checked_.text)
        assert checked_.json() == proposed.json() and checked_.json()["error"] == "TRAIT_EXISTS"
        replaces = {"trait_name": name, "version": 1}
        refused = await check(http, other, name, code(), replaces=replaces)
        assert refused.status_code == 403 and refused.json()["error"] == "NOT_TRAIT_OWNER", refused.text
        stale = await check(http, owner, name, code(), replaces={"trait_name": name, "version": 7})
        assert stale.status_code == 409 and stale.json()["error"] == "VERSION_CONFLICT", stale.text
        new_version = await checked(http, owner, name, code(), replaces=replaces)
        assert new_version["verdict"] == "passed", new_version
    finally:
        rollback = await http.post(f"/api/mutations/{live['mutation_id']}/rollback", headers=owner.headers)
        assert rollback.status_code == 202, rollback.text


async def test_keys_and_fields_as_for_propose(http, settings):
    agent = await agents.register(http, "check-fields")
    missing = await check(http, None, "nokey", code())
    assert missing.status_code == 401 and missing.json()["error"] == "API_KEY_REQUIRED", missing.text
    assert missing.headers["www-authenticate"] == 'ApiKey header="X-API-Key"'
    wrong = await http.post(
        "/api/mutations/check", json={"trait_name": "x", "code": code()}, headers={"X-API-Key": "gen_" + "0" * 40}
    )
    assert wrong.status_code == 401 and wrong.json()["error"] == "INVALID_API_KEY", wrong.text
    other = await check(http, agent, "x", code(), agent_id="someone-else")
    assert other.status_code == 403 and other.json()["error"] == "AGENT_ID_MISMATCH", other.text
    for field, value in (("goal", "g"), ("task_id", "task_1"), ("notify_url", "https://example.org/hook")):
        response = await check(http, agent, "x", code(), **{field: value})
        assert response.status_code == 422, response.text
        assert response.json()["errors"] == [
            {"field": field, "message": "unknown field (not part of the request schema)"}
        ], response.text
    bad_name = await check(http, agent, "Not-Snake", code())
    assert bad_name.status_code == 422 and bad_name.json()["errors"][0]["field"] == "trait_name"
    assert await count_mutations(settings, agent.agent_id) == 0


def assert_429(response: httpx.Response, detail: str) -> None:
    assert response.status_code == 429, response.text
    body = response.json()
    assert set(body) == {"error", "detail", "retry_after_sec"} and body["error"] == "RATE_LIMIT_EXCEEDED", body
    assert body["detail"] == detail and 1 <= body["retry_after_sec"] <= ratelimit.CHECK_WINDOW_S, body
    assert response.headers["retry-after"] == str(body["retry_after_sec"])


async def test_checks_have_their_own_rate_limits(limited_url, settings, redis_client):
    # Quick verdicts (the gatekeeper refuses): the limits, not the sandbox, are under test here.
    rejected = traits.FORBIDDEN_IMPORT
    async with client_from(limited_url, "127.0.0.41") as http:
        agent = await agents.register(http, "check-limited")
        for _ in range(2):
            assert (await checked(http, agent, "limited", rejected))["failure_reason_code"] == "AST_IMPORT_FORBIDDEN"
        over = await check(http, agent, "limited", rejected)
        assert_429(over, f"Too many checks from agent_id '{agent.agent_id}' this minute (limit: 2 per minute)")
        assert int(await redis_client.get(ratelimit_check_agent_minute(agent.agent_id))) == 2  # the refusal took none
        me = (await http.get("/v1/agents/me", headers=agent.headers)).json()
        assert me["rate_limits"]["proposals_this_hour"] == 0 and me["reputation"]["proposed"] == 0, me
        # Proposals are counted apart: the checks used up none of them.
        response = await propose(http, agent, "limited", rejected)
        assert response.status_code == 202, response.text
    async with client_from(limited_url, "127.0.0.42") as http:
        first, second = await agents.register(http, "check-ip-1"), await agents.register(http, "check-ip-2")
        for agent in (first, first, second):
            assert (await check(http, agent, "limited", rejected)).status_code == 200
        assert_429(
            await check(http, second, "limited", rejected),
            "Too many checks from IP 127.0.0.42 this minute (limit: 3 per minute)",
        )


async def test_no_verdict_in_time_is_503_and_records_nothing(start_api, settings):
    url = await start_api("api-check-unpolled", task_queue=UNPOLLED, sandbox_check_timeout_s=2)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        agent = await agents.register(http, "check-timeout")
        started = time.monotonic()
        response = await check(http, agent, "waiting", code())
        waited = time.monotonic() - started
    assert response.status_code == 503, response.text
    body = response.json()
    assert body["error"] == "CHECK_TIMEOUT" and "no verdict within 2 s" in body["detail"], body
    assert 2 <= waited < 15, waited
    assert await count_mutations(settings, agent.agent_id) == 0


async def test_genesis_check_prints_the_verdict_and_exits_like_a_linter(api_url, http, settings):
    agent = await agents.register(http, "check-cli")
    good = next(example for example in examples() if example.path.name == "energy_saver.py")
    bad = next(example for example in examples() if example.path.name == "rejected_import_os.py")

    code_, out, err = await invoke(api_url, "check", str(good.path), key=agent.api_key)
    assert code_ == 0, (out, err)
    assert "Checking energy_saver" in out and re.search(r"Sandbox: OK — \d+ ticks", out) and "Sandbox report:" in out, (
        out
    )
    assert "Passed: energy_saver would pass validation and the sandbox test" in out, out
    assert f"genesis propose {good.path} --name energy_saver" in out, out

    code_, out, err = await invoke(api_url, "check", str(bad.path), "--name", "snooper", key=agent.api_key)
    assert code_ == 1, (out, err)
    assert "Rejected: AST_IMPORT_FORBIDDEN\n  Import whitelist: FAILED — Forbidden import: os (line 16)" in out, out

    code_, out, err = await invoke(api_url, "check", str(bad.path), "--json", key=agent.api_key)
    assert code_ == 1, (out, err)
    answer = json.loads(out)
    assert answer["verdict"] == "rejected" and answer["trait_name"] == "rejected_import_os", answer

    code_, out, err = await invoke(api_url, "check", str(good.path))  # no key
    assert code_ == 2 and "API_KEY_REQUIRED" in err and "pass --api-key" in err, (out, err)
    code_, out, err = await invoke(api_url, "check", "-", key=agent.api_key)  # no name to take
    assert code_ == 2 and "--name" in err, (out, err)
    code_, out, err = await invoke(api_url, "check", str(good.path), "--name", "Bad-Name", key=agent.api_key)
    assert code_ == 2 and "VALIDATION_ERROR" in err, (out, err)
    assert await count_mutations(settings, agent.agent_id) == 0


async def test_concurrent_checks_each_get_their_own_verdict(http):
    agent = await agents.register(http, "check-concurrent")
    sources = [code() for _ in range(3)] + [raising(uuid.uuid4().hex[:8])]
    answers = await asyncio.gather(*(checked(http, agent, f"parallel_{i}", s) for i, s in enumerate(sources)))
    assert [a["verdict"] for a in answers] == ["passed", "passed", "passed", "rejected"], answers
    assert len({a["sandbox_report"]["container_id"] for a in answers}) == 4  # a fresh container each
