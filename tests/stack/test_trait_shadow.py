"""The shadow of a held mutation on real services: its trait runs in trait-host containers beside
the live traits in a fork of a real journaled world, against the same world without it; the same
request gives the same report twice; a trait the engine would quarantine is quarantined in the
fork, not in the baseline; without a journal the mutation still waits, saying why no shadow ran;
and through the API a held mutation shows its shadow report (the real worker's activities, in
this process, on the journal of a real run)."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import docker
import httpx
import pytest
from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
from sqlalchemy.pool import NullPool

from activities.sandbox import SandboxActivities
from activities.trait_shadow import TraitShadowActivities, host_factory, run_trait_shadow
from engine.core.shadow import report_hash
from genesis.dto import MutationApproval, TraitShadowRequest
from genesis.workflow_api import MUTATION_APPROVAL_SIGNAL
from governance.records import manifests
from pipeline.registry import RegistryEntry
from sandbox import image
from sandbox.container import IsolationLimits, TraitHostContainer, hello_message
from tests import agents, traits
from tests.cli_runs import invoke, record_history
from tests.journal_worlds import journal_settings, run_journaled
from tests.pipeline_steps import wait_for_status
from worker import build_workers

QUEUE = "genesis-test-trait-shadow"
SNAPSHOT_TICK = 800  # the journal's latest kept snapshot
SHADOW_TICKS = 120

# A live trait the snapshot's Molbots carry (tests/journal_worlds.py runs one of this name).
LIVE = RegistryEntry(
    trait_name="forager",
    version=3,
    mutation_id="mut_f0a001",
    class_name="SeekerTrait",
    code=traits.seeker(1),
    code_hash="0" * 64,
    agent_id="agent-forager",
)


@pytest.fixture(scope="module")
async def journal(tmp_path_factory):
    path = tmp_path_factory.mktemp("trait-shadow-journal")
    await run_journaled(journal_settings(path, 17, journal_snapshot_interval=200), SNAPSHOT_TICK)
    return path


@pytest.fixture(scope="module")
def docker_client():
    client = docker.from_env(timeout=60)
    yield client
    client.close()


def request(trait_name: str, class_name: str, code: str, agent_id: str = "agent-newcomer") -> TraitShadowRequest:
    return TraitShadowRequest(
        mutation_id=f"mut_shadow_{trait_name}",
        agent_id=agent_id,
        trait_name=trait_name,
        class_name=class_name,
        code=code,
    )


async def test_a_new_trait_runs_beside_the_live_ones_and_reports_the_same_bytes_twice(journal, docker_client):
    settings = journal_settings(journal, 17)
    newcomer = request("newcomer", "SeekerTrait", traits.seeker(5))
    first, second = [
        await asyncio.to_thread(run_trait_shadow, newcomer, settings, docker_client, [LIVE], SHADOW_TICKS)
        for _ in range(2)
    ]
    assert report_hash(first) == report_hash(second)
    assert (first["from_tick"], first["ticks"]) == (SNAPSHOT_TICK, SHADOW_TICKS)
    baseline, candidate = first["baseline"], first["candidate"]
    assert set(baseline["traits"]) == {"forager"} and set(candidate["traits"]) == {"forager", "newcomer"}
    assert baseline["traits"]["forager"]["calls"] > 0  # the live trait ran on both sides, in its host
    assert candidate["traits"]["forager"]["calls"] > 0
    # a new trait starts on a tenth of the Molbots (at least 5), then it runs
    seeded = candidate["carriers"]["seeded"]
    assert seeded >= 5 and candidate["carriers"]["start"] == seeded
    assert candidate["traits"]["newcomer"]["calls"] >= seeded
    assert first["trait"] == {"name": "newcomer", "mutation_id": newcomer.mutation_id, "replaces_version": None}
    assert baseline["missed_ticks"] == candidate["missed_ticks"] == 0
    assert first["differences"]["same_end_state"] is False  # the trait moved its carriers


async def test_a_replacement_the_engine_would_quarantine_is_quarantined_in_the_fork(journal, docker_client):
    settings = journal_settings(journal, 17)
    exploding = request("forager", "ExplodingTrait", traits.RAISES, agent_id=LIVE.agent_id)
    report = await asyncio.to_thread(run_trait_shadow, exploding, settings, docker_client, [LIVE], SHADOW_TICKS)
    assert report["trait"]["replaces_version"] == LIVE.version
    candidate, baseline = report["candidate"], report["baseline"]
    # the live version's carriers run the replacement at once; nobody else is given it
    assert candidate["carriers"]["start"] > 0 and candidate["carriers"]["seeded"] == 0
    replaced = candidate["traits"]["forager"]
    assert replaced["quarantined_at_tick"] == SNAPSHOT_TICK + 2  # the third tick in a row that raised
    assert "ValueError: boom" in replaced["first_error"] and replaced["errors"] > 0
    assert candidate["carriers"]["end"] == 0  # a quarantine takes the trait from every Molbot
    assert baseline["traits"]["forager"]["quarantined_at_tick"] is None
    assert baseline["traits"]["forager"]["errors"] == 0


async def test_without_a_journal_no_shadow_runs_and_it_says_why(settings, docker_client, tmp_path):
    database = create_async_engine(settings.database_url, poolclass=NullPool)
    try:
        acts = TraitShadowActivities(
            settings.override(journal_dir=tmp_path), async_sessionmaker(database), docker_client
        )
        outcome = await acts.shadow_mutation(request("nowhere", "SeekerTrait", traits.seeker(6)))
    finally:
        await database.dispose()
    assert outcome.report is None and outcome.not_run == "no journal to fork from"


def scheduling_policies(host: TraitHostContainer) -> set[str]:
    """The scheduling policy of every process of a host's container (0 normal, 5 idle)."""
    pids = [int(row[1]) for row in host._container.top()["Processes"]]
    policies = set()
    for pid in pids:
        for line in Path(f"/proc/{pid}/sched").read_text().splitlines():
            if line.startswith("policy"):
                policies.add(line.split(":")[1].strip())
    return policies


def test_a_forks_trait_host_runs_in_the_idle_class_and_the_live_one_does_not(settings, docker_client):
    """Whatever the live world wakes takes the CPU from a fork's host at once."""
    fork_host = host_factory(settings, docker_client, "test-idle")("fork")
    live = TraitHostContainer(
        docker_client, image.ensure(docker_client), IsolationLimits.for_engine(settings), "test-live"
    )
    try:
        live.say_hello(hello_message(settings, 0.5), 20)
        assert scheduling_policies(fork_host.host) == {"5"}
        assert scheduling_policies(live) == {"0"}
    finally:
        fork_host.close()
        live.close()


@pytest.fixture(scope="module")
async def held_with_short_shadows(settings):
    """The manifest holds an agent's first trait for an operator, with short shadow runs."""
    database = create_async_engine(settings.database_url, poolclass=NullPool)
    async with database.begin() as conn:
        before = await manifests.current(conn, settings)
        document = {
            **before.document,
            "approvals": {**before.document["approvals"], "first_traits": 1, "ttl_sec": 3600},
            "governance": {**before.document["governance"], "shadow_ticks": SHADOW_TICKS},
        }
        now = await manifests.record(conn, document, "test: trait shadows", before.hash)
    yield now
    async with database.begin() as conn:
        await manifests.record(conn, before.document, "test: restored", now.hash)
    await database.dispose()


async def test_a_held_mutation_shows_its_shadow_report_and_is_approved_for_it(
    settings, journal, start_api, temporal_client, held_with_short_shadows
):
    worker_settings = settings.override(task_queue=QUEUE, journal_dir=journal)
    operator = await agents.operator_headers(settings)
    sandbox = await asyncio.to_thread(SandboxActivities, worker_settings)
    try:
        with ThreadPoolExecutor(max_workers=2) as executor:
            pipeline, _llm, journal_worker, *_ = build_workers(temporal_client, worker_settings, executor, sandbox)
            async with pipeline, journal_worker:
                url = await start_api("trait-shadow", task_queue=QUEUE)
                async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                    dora = await agents.register(http, "shadow-dora")
                    body = {"trait_name": "shadowed", "goal": "a shadow", "code": traits.unique_seeker()}
                    answer = await http.post("/api/mutations/propose", json=body, headers=dora.headers)
                    assert answer.status_code == 202, answer.text
                    mutation_id = answer.json()["mutation_id"]
                    held = await wait_for_status(http, mutation_id, {"awaiting_approval"}, timeout_s=120)
                    code, shown, _ = await invoke(url, "status", mutation_id, key=dora.api_key)
                    assert code == 8 and f"report hash: {held['shadow_report']['report_hash']}" in shown, shown
                    path = f"/api/mutations/{mutation_id}/approval"
                    other = {"decision": "approve", "report_hash": "0" * 64}
                    refused = await http.post(path, json=other, headers=operator)
                    assert refused.status_code == 409 and refused.json()["error"] == "REPORT_MISMATCH"
                    assert held["shadow_report"]["report_hash"] in refused.json()["detail"]
                    malformed = await http.post(
                        path, json={"decision": "approve", "report_hash": "9F2C"}, headers=operator
                    )
                    assert malformed.status_code == 422, malformed.text
                    assert "64 lowercase hex digits" in malformed.json()["detail"] and "pattern" not in malformed.text
                    unnamed = await http.post(path, json={"decision": "approve"}, headers=operator)
                    assert unnamed.status_code == 422 and "report_hash" in unnamed.json()["detail"], unnamed.text
                    # The workflow holds the line itself: an approval of another report that reaches
                    # it past the API is not taken.
                    await temporal_client.get_workflow_handle(f"mutation-{mutation_id}").signal(
                        MUTATION_APPROVAL_SIGNAL,
                        MutationApproval(decision="approve", by="past the API", report_hash="0" * 64),
                    )
                    await asyncio.sleep(2)
                    still = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
                    assert still["status"] == "awaiting_approval", still
                    mine = {"decision": "approve", "report_hash": held["shadow_report"]["report_hash"]}
                    assert (await http.post(path, json=mine, headers=operator)).status_code == 202
                    await wait_for_status(http, mutation_id, {"activated", "kept"}, timeout_s=120)
                    rollback = await http.post(
                        f"/api/mutations/{mutation_id}/rollback", json={"reason": "test over"}, headers=dora.headers
                    )
                    assert rollback.status_code in (200, 202), rollback.text
                    await wait_for_status(http, mutation_id, {"rolled_back"}, timeout_s=90)
                    await record_history(temporal_client, f"mutation-{mutation_id}", "mutation_approved_at_stage")
    finally:
        await asyncio.to_thread(sandbox.close)
    shadow = held["shadow_report"]
    assert shadow["kind"] == "trait" and shadow["from_tick"] == SNAPSHOT_TICK
    assert SHADOW_TICKS <= shadow["ticks"] <= SHADOW_TICKS * 3 // 2  # drawn for each shadow
    assert shadow["trait"]["mutation_id"] == mutation_id
    assert "shadowed" in shadow["candidate"]["traits"] and "shadowed" not in shadow["baseline"]["traits"]
    assert shadow["report_hash"] == report_hash({k: v for k, v in shadow.items() if k != "report_hash"})
    line = held["validation_log"][-2]
    assert line.startswith(f"Shadow: {shadow['ticks']} ticks from tick {SNAPSHOT_TICK} — population "), line
    assert held["validation_log"][-1].startswith("Approval: waiting for an operator")
