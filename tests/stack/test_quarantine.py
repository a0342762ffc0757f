"""Quarantine is part of the mutation lifecycle: a trait the live engine quarantines is recorded
in Postgres, shown as quarantined by the API at once, never loaded again by a restarted engine,
and its mutation ends ``rolled_back`` with ``rollback_reason`` ``quarantined: <why>`` — through
its own workflow while it is under observation, through a RollbackWorkflow once it was kept.

The trait raises only in a world wider than its sandbox test's (800 units): it passes its test,
goes live harmlessly in an engine of that width, and keeps raising in an engine 1000 units wide.
Everything is real: a stack of its own (tests/own_stack.py: database, Redis db, worker, API),
engines started and stopped here, the trait host, the session's Temporal server; the CLI and the
world viewer (headless Chromium) read the same API."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import pytest
import redis.asyncio as aioredis
from temporalio.api.enums.v1 import EventType
from temporalio.client import WorkflowExecutionStatus

from cli.processes import ManagedProcess, api_process, engine_process, wait_for_api, worker_process
from genesis.redis_keys import ENGINE_STATUS
from genesis.workflow_api import rollback_workflow_id
from pipeline import registry
from tests.cli_runs import invoke
from tests.own_stack import own_settings
from tests.pipeline_steps import propose, wait_for_status, wait_until
from tests.services import fresh_journal
from tests.viewer_pages import viewer

SANDBOX_WIDTH = 800.0  # the sandbox test's world (activities/sandbox.py: WorldParams())
WIDE = 1000.0


def wide_world_raiser(trait_name: str) -> str:
    """Harmless in a world as wide as its sandbox test's; raises on every call in a wider one."""
    return f'''
class BaseTrait:
    pass

class WideWorldRaiser(BaseTrait):
    async def execute(self, entity) -> None:
        if entity.world_width > {(SANDBOX_WIDTH + WIDE) / 2}:
            raise RuntimeError("{trait_name}: the world is wider than its sandbox")
        entity.state = "narrow"
'''


class Stack:
    def __init__(self, settings, http: httpx.AsyncClient, worker: ManagedProcess):
        self.settings, self.http, self.worker = settings, http, worker
        self.engine: ManagedProcess | None = None

    async def start_engine(self, width: float) -> None:
        """Stop the running engine (if any) and start one with a world ``width`` units wide."""
        self.stop_engine()
        redis = aioredis.from_url(self.settings.redis_url)
        try:
            await redis.delete(ENGINE_STATUS)
            self.engine = engine_process(
                fresh_journal(self.settings.override(engine_world_width=width), "quarantine"), "engine-quarantine"
            )
            self.engine.start()
            await wait_until(lambda: redis.exists(ENGINE_STATUS), timeout_s=60, what="the engine to start")
        finally:
            await redis.aclose()

    def stop_engine(self) -> None:
        if self.engine is not None:
            self.engine.stop()
            self.engine = None

    async def start_worker(self) -> None:
        self.worker.start()
        await wait_until(self._healthy, timeout_s=90, what="the stack's worker to poll")

    async def _healthy(self) -> bool:
        return (await self.http.get("/api/health")).status_code == 200

    async def quarantine_messages(self, mutation_id: str) -> list[dict]:
        messages = (await self.http.get("/api/feed", params={"limit": 500})).json()["messages"]
        return [m for m in messages if m["action"] == "trait_quarantined" and m["mutation_id"] == mutation_id]


@pytest.fixture(scope="module")
async def stack(settings):
    """A stack of its own whose worker the tests stop and start; a rollback threshold no window
    reaches, so a harmless trait is kept; every entity the engine spawns carries the live traits."""
    own = await own_settings(
        settings,
        "quarantine",
        rollback_threshold=-1000.0,
        engine_initial_population=0,
        engine_min_population=200,
        engine_trait_gain_chance=1.0,
    )
    worker, api = worker_process(own, "quarantine-worker"), api_process(own, "quarantine-api")
    api.start()
    url = await asyncio.to_thread(wait_for_api, api)
    async with httpx.AsyncClient(base_url=url, timeout=30) as http:
        running = Stack(own, http, worker)
        try:
            await running.start_worker()
            yield running
        finally:
            running.stop_engine()
            api.stop()
            worker.stop()


async def _quarantined(http, mutation_id: str) -> dict | None:
    status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
    return status if status["quarantine"] else None


async def _quarantined_traits(http, trait_name: str) -> list[dict]:
    answer = (await http.get("/api/traits")).json()
    return [q for q in answer["quarantined"] if q["trait_name"] == trait_name]


async def _rollback_signalled(temporal_client, workflow_id: str) -> bool:
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    return any(
        event.event_type == EventType.EVENT_TYPE_WORKFLOW_EXECUTION_SIGNALED
        and event.workflow_execution_signaled_event_attributes.signal_name == "rollback"
        for event in history.events
    )


async def _live_trait_names(http) -> set[str]:
    return {t["trait_name"] for t in (await http.get("/api/traits")).json()["traits"]}


async def test_a_trait_quarantined_live_is_recorded_never_reloaded_and_rolled_back_by_its_workflow(
    stack, temporal_client, browser
):
    http = stack.http
    mutation_id = await propose(http, wide_world_raiser("wide_raiser"), trait_name="wide_raiser")
    await wait_for_status(http, mutation_id, {"activated"})
    assert "wide_raiser" in await _live_trait_names(http)
    # Without a worker the workflow cannot act on its signal: what the API shows meanwhile comes
    # from the engine's durable record alone.
    stack.worker.stop()
    try:
        await _quarantined_while_the_worker_is_down(stack, temporal_client, mutation_id)
    finally:
        await stack.start_worker()
    status = await wait_for_status(http, mutation_id, {"rolled_back", "kept"}, timeout_s=90)
    assert status["status"] == "rolled_back", status
    why = status["quarantine"]["reason"]
    assert status["rollback_reason"] == f"quarantined: {why}", status
    assert status["validation_log"][-1] == f"Rollback: quarantined: {why}", status["validation_log"]
    assert status["fitness_verdict"] is None and status["quarantine"]["reason"] == why
    [version] = (await http.get("/api/traits/wide_raiser")).json()["versions"]
    assert version["status"] == "rolled_back" and version["mutation_status"] == "rolled_back", version
    assert version["rollback_reason"] == f"quarantined: {why}" and version["quarantine"]["reason"] == why
    listed = (await http.get("/api/mutations", params={"trait_name": "wide_raiser"})).json()["mutations"]
    assert [m["quarantine"]["reason"] for m in listed] == [why]
    code, out, _ = await invoke(str(http.base_url), "mutations", "list", "--trait", "wide_raiser")
    assert code == 0 and "rolled_back (quarantined)" in out, out
    [listed] = await _quarantined_traits(http, "wide_raiser")  # still shown, until a newer version
    assert listed["mutation_status"] == "rolled_back" and listed["quarantine"]["reason"] == why, listed
    code, out, _ = await invoke(str(http.base_url), "traits")
    assert f"wide_raiser is quarantined: {why} (it no longer runs; it was rolled back)" in " ".join(out.split()), out
    async with viewer(browser, str(http.base_url)) as page:
        trait_row = page.locator('#traits li[data-quarantined="true"][data-trait-name="wide_raiser"]')
        await trait_row.wait_for(timeout=15_000)
        assert await trait_row.locator(".status.quarantined").text_content() == "quarantined"
        assert why in await trait_row.text_content() and "rolled back" in await trait_row.text_content()
        row = page.locator(f'#mutations li[data-mutation-id="{mutation_id}"]')
        await row.locator(".status.quarantined").wait_for(timeout=15_000)
        assert await row.locator(".status.rolled_back").text_content() == "rolled_back"
        await row.locator(".head").click()
        await row.locator("p.note", has_text=f"rolled back: quarantined: {why}").wait_for(timeout=5_000)
        assert page.errors == []


async def _quarantined_while_the_worker_is_down(stack: Stack, temporal_client, mutation_id: str) -> None:
    """A wide engine quarantines the trait; with no worker polling, the API shows the engine's
    record, the rollback signal waits in the workflow's history, and a restarted engine leaves the
    trait out."""
    http = stack.http
    await stack.start_engine(WIDE)

    status = await wait_until(lambda: _quarantined(http, mutation_id), timeout_s=90, what="the quarantine record")
    assert status["status"] == "activated", status  # the workflow has not processed the signal yet
    why = status["quarantine"]["reason"]
    assert why and status["quarantine"]["quarantined_at"] <= time.time() + 1
    assert "wide_raiser" not in await _live_trait_names(http)
    [listed] = await _quarantined_traits(http, "wide_raiser")
    assert (listed["version"], listed["mutation_id"], listed["mutation_status"]) == (1, mutation_id, "activated")
    assert listed["quarantine"]["reason"] == why and listed["live_version"] is None, listed
    detail = (await http.get("/api/traits/wide_raiser")).json()
    assert detail["live"] is None and detail["live_version"] is None, detail
    [version] = detail["versions"]
    assert version["status"] == "quarantined" and version["quarantine"]["reason"] == why, version
    await wait_until(
        lambda: _rollback_signalled(temporal_client, status["workflow_id"]),
        timeout_s=30,
        what="the rollback signal to reach the mutation's workflow",
    )
    [announced] = await stack.quarantine_messages(mutation_id)
    assert announced["agent"] == "engine" and announced["message"] == f"Trait 'wide_raiser' v1 quarantined: {why}"
    code, out, _ = await invoke(str(http.base_url), "status", mutation_id)
    assert code == 0 and "activated (quarantined)" in out, out
    code, out, _ = await invoke(str(http.base_url), "traits", "--json")
    [shown] = [t for t in json.loads(out)["traits"] if t["trait_name"] == "wide_raiser"]
    assert shown["quarantined"] is True and shown["quarantine"]["reason"] == why, shown
    assert shown["mutation_id"] == mutation_id and shown["version"] == 1 and shown["mutation_status"] == "activated"
    code, out, _ = await invoke(str(http.base_url), "traits")
    assert code == 0 and re.search(rf"^wide_raiser v1\s+{mutation_id}\s.*\squarantined\s*$", out, re.M), out
    assert f"wide_raiser is quarantined: {why} (it no longer runs; its rollback follows)" in out

    # A restarted engine (its rollback still pending) does not load the quarantined version.
    await stack.start_engine(WIDE)
    redis = aioredis.from_url(stack.settings.redis_url)
    try:
        assert "wide_raiser" not in await registry.read_entries(redis), "the rebuilt registry leaves it out"
    finally:
        await redis.aclose()
    await asyncio.sleep(3)  # three registry refreshes: a reload would be quarantined again within ticks
    assert len(await stack.quarantine_messages(mutation_id)) == 1, "the restarted engine loaded it again"
    assert "wide_raiser" not in (await http.get("/api/stats")).json()["active_traits"]


async def test_a_kept_trait_quarantined_later_is_rolled_back_by_a_rollback_workflow(stack, temporal_client):
    http = stack.http
    await stack.start_engine(SANDBOX_WIDTH)  # harmless here: observed and kept
    mutation_id = await propose(http, wide_world_raiser("late_raiser"), trait_name="late_raiser")
    status = await wait_for_status(http, mutation_id, {"kept", "rolled_back"}, timeout_s=120)
    assert status["status"] == "kept", status
    assert status["quarantine"] is None and "late_raiser" in await _live_trait_names(http)
    assert await _quarantined_traits(http, "late_raiser") == []

    await stack.start_engine(WIDE)  # its workflow has ended: a RollbackWorkflow must do it
    status = await wait_for_status(http, mutation_id, {"rolled_back"}, timeout_s=90)
    why = status["quarantine"]["reason"]
    assert status["rollback_reason"] == f"quarantined: {why}", status
    assert status["validation_log"][-1] == f"Rollback: quarantined: {why}", status["validation_log"]
    assert status["fitness_verdict"] in ("positive", "neutral", "inconclusive"), "its kept verdict stays on record"
    rollback = await temporal_client.get_workflow_handle(rollback_workflow_id(mutation_id)).describe()
    assert rollback.status == WorkflowExecutionStatus.COMPLETED
    assert "late_raiser" not in await _live_trait_names(http)
    [listed] = await _quarantined_traits(http, "late_raiser")
    assert listed["mutation_status"] == "rolled_back" and listed["quarantine"]["reason"] == why, listed
    code, out, _ = await invoke(str(http.base_url), "status", mutation_id)
    assert code == 4 and "rolled_back (quarantined)" in out and why in " ".join(out.split()), out
    assert len(await stack.quarantine_messages(mutation_id)) == 1
    stack.stop_engine()
