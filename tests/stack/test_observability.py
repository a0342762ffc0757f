"""Prometheus metrics and structured logs of real processes: the API's GET /metrics, the engine's
and the worker's metrics servers, and the worker's JSON log lines of one mutation."""

from __future__ import annotations

import asyncio
import json
import random
import time

import httpx
from prometheus_client.parser import text_string_to_metric_families
from temporalio.testing import WorkflowEnvironment

from cli.processes import LOG_DIR, TEMPORAL_CLI, engine_process, free_port, worker_process
from genesis.logs import ids_from_workflow_id
from genesis.temporal_setup import SEARCH_ATTRIBUTES, ensure_search_attributes
from tests import agents, traits
from tests.pipeline_steps import wait_for_verdict
from tests.services import ENGINE_REDIS_URL, fresh_journal


def samples(text: str) -> dict[tuple[str, frozenset], float]:
    """{(sample name, labels): value} of a Prometheus text exposition."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, frozenset(sample.labels.items()))] = sample.value
    return found


def value(scraped: dict, name: str, **labels: str) -> float:
    return scraped.get((name, frozenset(labels.items())), 0.0)


async def scrape(url: str) -> dict:
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.get(url)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return samples(response.text)


async def scrape_when_up(url: str, timeout_s: float = 60) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            return await scrape(url)
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.2)


# -- API ---------------------------------------------------------------------------------------


async def test_api_metrics_count_requests_by_route_template_and_status(http):
    before = samples((await http.get("/metrics")).text)
    for _ in range(3):
        assert (await http.get("/api/mutations/mut_00000000/status")).status_code == 404
    assert (await http.get("/api/agents/context/sandbox-api")).status_code == 200
    assert (await http.get("/no/such/page")).status_code == 404
    # The seed's context metrics endpoint is untouched by /metrics
    context = await http.get("/api/agents/context/metrics")
    assert context.headers["content-type"].startswith("application/json"), context.text
    after = samples((await http.get("/metrics")).text)

    status_route = dict(method="GET", route="/api/mutations/{mutation_id}/status", status="404")
    assert (
        value(after, "genesis_api_requests_total", **status_route)
        - value(before, "genesis_api_requests_total", **status_route)
        == 3
    )
    assert (
        value(after, "genesis_api_request_duration_seconds_count", **status_route)
        - value(before, "genesis_api_request_duration_seconds_count", **status_route)
    ) == 3
    assert value(after, "genesis_api_request_duration_seconds_sum", **status_route) > 0
    rules = dict(method="GET", route="/api/agents/context/sandbox-api", status="200")
    assert (
        value(after, "genesis_api_requests_total", **rules) - value(before, "genesis_api_requests_total", **rules) == 1
    )
    unmatched = dict(method="GET", route="unmatched", status="404")
    assert (
        value(after, "genesis_api_requests_total", **unmatched)
        - value(before, "genesis_api_requests_total", **unmatched)
        == 1
    )
    # No label per concrete id: the template is the label
    assert not any("mut_00000000" in dict(labels).get("route", "") for _, labels in after)


async def test_api_metrics_count_proposals_by_outcome(http):
    def proposals(scraped: dict, source: str, outcome: str) -> float:
        return value(scraped, "genesis_api_mutation_proposals_total", source=source, outcome=outcome)

    before = samples((await http.get("/metrics")).text)
    body = {"trait_name": "metrics_probe", "goal": "metrics", "code": traits.unique_seeker()}
    assert (await http.post("/api/mutations/propose", json=body)).status_code == 401  # no X-API-Key
    headers = await agents.headers(http)
    batch = {"proposals": [{**body, "trait_name": "Not-Snake-Case"}, {**body, "replaces": {"trait_name": "other"}}]}
    answer = await http.post("/api/mutations/propose/batch", json=batch, headers=headers)
    assert answer.status_code == 207 and [r["status_code"] for r in answer.json()["results"]] == [422, 422]
    after = samples((await http.get("/metrics")).text)
    assert proposals(after, "single", "API_KEY_REQUIRED") - proposals(before, "single", "API_KEY_REQUIRED") == 1
    assert proposals(after, "batch", "VALIDATION_ERROR") - proposals(before, "batch", "VALIDATION_ERROR") == 2


# -- engine ------------------------------------------------------------------------------------


async def test_engine_metrics_report_ticks_entities_and_traits(settings):
    port = free_port()
    # Its own Redis db, and no snapshot within the test: it must not report observation windows
    # to the workflows of traits other test modules left live (they drive those windows).
    process = engine_process(
        fresh_journal(
            settings.override(redis_url=ENGINE_REDIS_URL, engine_metrics_port=port, engine_snapshot_interval=10**6),
            "metrics",
        ),
        "engine-metrics",
    )
    process.start()
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        first = await scrape_when_up(url)  # served from before the first tick
        deadline = time.monotonic() + 60
        while value(first, "genesis_engine_tick") == 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
            first = await scrape(url)
        await asyncio.sleep(1.5)  # ~90 ticks at 60 ticks/s, and a status interval (ticks per second)
        second = await scrape(url)
    finally:
        process.stop()
    assert value(second, "genesis_engine_tick") > value(first, "genesis_engine_tick") > 0
    assert value(second, "genesis_engine_ticks_total") - value(first, "genesis_engine_ticks_total") >= 30
    assert (
        value(second, "genesis_engine_tick_duration_seconds_count")
        - value(first, "genesis_engine_tick_duration_seconds_count")
    ) >= 30
    assert value(second, "genesis_engine_tick_duration_seconds_bucket", le="+Inf") == value(
        second, "genesis_engine_tick_duration_seconds_count"
    )
    assert value(second, "genesis_engine_ticks_per_second") > 10
    assert value(second, "genesis_engine_entities") >= settings.engine.min_population
    assert ("genesis_engine_tick_overruns_total", frozenset()) in second
    assert ("genesis_engine_trait_host_restarts_total", frozenset()) in second
    assert ("genesis_engine_live_traits", frozenset()) in second
    assert value(second, "genesis_gc_pause_seconds_count", generation="2") >= 1  # the start-up freeze


# -- worker: verdicts, stage durations, JSON logs of one mutation ----------------------------------


async def test_worker_metrics_and_json_logs_of_a_mutation(settings, start_api):
    """A worker and an API on a task queue of their own, the worker logging JSON: a good proposal
    and a raising one move the sandbox verdict counter; the mutation's log lines carry its ids."""
    queue = f"genesis-obs-{random.randrange(16**6):06x}"
    port, sdk_port = free_port(), free_port()
    log_name = "worker-observability"
    (LOG_DIR / f"{log_name}.log").unlink(missing_ok=True)
    worker = worker_process(
        settings.override(
            task_queue=queue,
            log_format="json",
            worker_metrics_port=port,
            activate_mutations=False,
            worker_sdk_metrics_port=sdk_port,
        ),
        log_name,
    )
    worker.start()
    try:
        url = await start_api("api-observability", task_queue=queue, activate_mutations=False)
        metrics_url = f"http://127.0.0.1:{port}/metrics"
        before = await scrape_when_up(metrics_url)
        async with httpx.AsyncClient(base_url=url, timeout=30) as http:
            headers = await agents.headers(http, "observability")
            good, bad = [
                (
                    await http.post(
                        "/api/mutations/propose",
                        headers=headers,
                        json={"trait_name": name, "goal": "metrics", "code": code},
                    )
                ).json()["mutation_id"]
                for name, code in (
                    ("metrics_seeker", traits.unique_seeker()),
                    ("metrics_raiser", traits.RAISES),
                )
            ]
            assert (await wait_for_verdict(http, good, timeout_s=120))["status"] == "sandbox_ok"
            rejected = await wait_for_verdict(http, bad, timeout_s=120)
            assert rejected["status"] == "rejected" and rejected["failure_reason_code"] == "SANDBOX_EXCEPTION"
            api_metrics = samples((await http.get("/metrics")).text)
        after = await scrape(metrics_url)
        sdk = await scrape(f"http://127.0.0.1:{sdk_port}/metrics")  # the Temporal SDK core's own
    finally:
        worker.stop()

    def delta(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert delta("genesis_sandbox_verdicts_total", verdict="ok") == 1
    assert delta("genesis_sandbox_verdicts_total", verdict="SANDBOX_EXCEPTION") == 1
    assert delta("genesis_sandbox_test_duration_seconds_count", verdict="ok") == 1
    assert value(after, "genesis_sandbox_test_duration_seconds_sum", verdict="ok") > 0
    assert delta("genesis_mutation_validations_total", verdict="ok") == 2
    assert delta("genesis_mutation_stage_duration_seconds_count", stage="validate", outcome="ok") == 2
    assert delta("genesis_mutation_stage_duration_seconds_count", stage="sandbox", outcome="ok") == 1
    assert delta("genesis_mutation_stage_duration_seconds_count", stage="sandbox", outcome="SANDBOX_EXCEPTION") == 1
    assert delta("genesis_mutation_status_transitions_total", status="sandbox_ok") == 1
    assert delta("genesis_mutation_status_transitions_total", status="rejected") == 1
    assert value(api_metrics, "genesis_api_mutation_proposals_total", source="single", outcome="accepted") == 2
    sandbox_runs = [
        v
        for (name, labels), v in sdk.items()
        if name == "temporal_activity_execution_latency_count"
        and dict(labels).get("activity_type") == "run_sandbox_test"
        and dict(labels).get("task_queue") == queue
    ]
    assert sum(sandbox_runs) == 2, sorted(name for name, _ in sdk)[:40]

    lines = [line for line in (LOG_DIR / f"{log_name}.log").read_text().splitlines() if line.strip()]
    records = [json.loads(line) for line in lines]  # every line of the worker is one JSON object
    assert all(r["service"] == "worker" and {"level", "timestamp", "event"} <= set(r) for r in records)
    for mutation_id, verdict in ((good, "ok"), (bad, "SANDBOX_EXCEPTION")):
        own = [r for r in records if r.get("mutation_id") == mutation_id]
        assert own, f"no log line of {mutation_id}"
        assert all(r["workflow_id"] == f"mutation-{mutation_id}" for r in own)
        verdict_lines = [r for r in own if r["event"].startswith(f"sandbox verdict {verdict} ")]
        assert len(verdict_lines) == 1 and verdict_lines[0]["activity"] == "run_sandbox_test"
        assert verdict_lines[0]["attempt"] >= 1 and verdict_lines[0]["run_id"]
        assert "({" not in verdict_lines[0]["event"]  # the ids are fields, not appended to the message

    # Both processes froze their start-up heap and time their collections (genesis/gc_tuning.py):
    # the freeze's own full collection is the first generation-2 pause each one reports.
    assert any(r["event"].startswith("start-up heap frozen: ") for r in records)
    for scraped in (after, api_metrics):
        assert value(scraped, "genesis_gc_pause_seconds_count", generation="2") >= 1
        assert value(scraped, "genesis_gc_pause_max_seconds", generation="2") > 0
        assert value(scraped, "genesis_gc_pause_seconds_count", generation="0") > 0


async def test_the_api_freezes_its_start_up_heap_before_it_serves(start_api):
    """The freeze (and its ~100 ms collection) and FastAPI's per-route state are done before the
    API accepts a connection (api/app.py), not in the first seconds of traffic."""
    url = await start_api("api-frozen-heap")
    async with httpx.AsyncClient(base_url=url, timeout=10) as http:
        scraped = samples((await http.get("/metrics")).text)
    assert value(scraped, "genesis_gc_frozen_objects") > 10_000
    assert value(scraped, "genesis_gc_pause_seconds_count", generation="2") >= 1


def test_workflow_ids_name_their_mutation_or_task():
    assert ids_from_workflow_id("mutation-mut_3f9c2a1b7d40") == {"mutation_id": "mut_3f9c2a1b7d40"}
    assert ids_from_workflow_id("rollback-mut_3f9c2a1b7d40") == {"mutation_id": "mut_3f9c2a1b7d40"}
    assert ids_from_workflow_id("task-task_5d0c2e9a41f3") == {"task_id": "task_5d0c2e9a41f3"}
    assert ids_from_workflow_id("something-else") == {}


# -- Temporal search attributes for a cluster (compose's migrate one-shot) --------------------


async def test_search_attributes_are_registered_once_on_a_fresh_server():
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI), dev_server_log_level="error"
    )
    try:
        assert await ensure_search_attributes(env.client, "default") == sorted(SEARCH_ATTRIBUTES)
        assert await ensure_search_attributes(env.client, "default") == []
    finally:
        await env.shutdown()
