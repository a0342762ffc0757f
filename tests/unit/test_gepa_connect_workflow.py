"""Every branch of GepaConnectWorkflow on Temporal's time-skipping server, with its activities
replaced by name: the clone, its refusals (with or without a code of their own), retries, and the
client's record, written whatever happened. The real activities run in tests/stack/test_gepa_steps.py
and test_gepa_github.py."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

import pytest
from temporalio import activity
from temporalio.exceptions import ApplicationError
from temporalio.worker import Worker

from activities import names
from gepa_steps.connect_workflow import GepaConnectWorkflow
from gepa_steps.dto import GEPA_CONNECT_WORKFLOW, STEP_FAILED, ConnectRequest, ConnectResult
from tests.workflow_doubles import record_call, unique_queue

REPO_URL = "https://github.com/acme/qa.git"


def connect_request() -> ConnectRequest:
    return ConnectRequest(client_id=f"client_{uuid.uuid4().hex[:16]}", repo_url=REPO_URL, installation_id=42)


@dataclass
class Script:
    """What each replaced activity does, and the calls they got (name, attempt)."""

    clone: list[Exception] = field(default_factory=list)  # raised by the first attempts, in order
    outages: int = 0  # attempts of the record for which the database is away
    calls: list[tuple[str, int]] = field(default_factory=list)
    records: list[tuple[str, str, str | None, str | None]] = field(default_factory=list)

    def activities(self) -> list:
        @activity.defn(name=names.GEPA_CLONE_REPOSITORY)
        async def clone_repository(request: ConnectRequest) -> ConnectResult:
            record_call(self.calls, "clone", self.clone)
            return ConnectResult(client_id=request.client_id, default_branch="main", head_commit="c" * 40)

        @activity.defn(name=names.GEPA_RECORD_CLIENT)
        async def record_client(client_id: str, status: str, default_branch: str | None, error: str | None) -> None:
            attempt = activity.info().attempt
            self.calls.append(("record", attempt))
            if attempt <= self.outages:
                raise ConnectionError("the database is away")
            self.records.append((client_id, status, default_branch, error))

        return [clone_repository, record_client]


async def run_connect(env, script: Script, request: ConnectRequest) -> ConnectResult:
    queue = unique_queue("gepa-connect")
    async with Worker(env.client, task_queue=queue, workflows=[GepaConnectWorkflow], activities=script.activities()):
        return await env.client.execute_workflow(
            GEPA_CONNECT_WORKFLOW,
            request,
            id=f"gepa-connect-{request.client_id}",
            task_queue=queue,
            result_type=ConnectResult,
        )


async def test_a_clone_that_works_records_the_client_connected_with_its_branch(skipping_env):
    script = Script()
    request = connect_request()
    result = await run_connect(skipping_env, script, request)
    assert script.calls == [("clone", 1), ("record", 1)]
    assert result == ConnectResult(client_id=request.client_id, default_branch="main", head_commit="c" * 40)
    assert script.records == [(request.client_id, "connected", "main", None)]


async def test_a_refused_clone_is_not_retried_and_records_the_client_failed_without_a_code(skipping_env):
    """The generic verdict (a git error, a refused host) has no code of its own."""
    verdict = ApplicationError(f"cloning {REPO_URL} failed: not found", type=STEP_FAILED, non_retryable=True)
    script = Script(clone=[verdict])
    request = connect_request()
    result = await run_connect(skipping_env, script, request)
    assert script.calls == [("clone", 1), ("record", 1)]
    assert result == ConnectResult(client_id=request.client_id, error=f"cloning {REPO_URL} failed: not found")
    assert script.records == [(request.client_id, "failed", None, f"cloning {REPO_URL} failed: not found")]


async def test_the_verdict_type_alone_stops_retries(skipping_env):
    """A STEP_FAILED error raised as retryable is still not retried (INFRA_RETRY lists its type)."""
    script = Script(clone=[ApplicationError("bad url", type=STEP_FAILED)])
    result = await run_connect(skipping_env, script, connect_request())
    assert script.calls == [("clone", 1), ("record", 1)]
    assert result.error == "bad url" and result.error_code is None


async def test_a_github_app_refusal_keeps_its_code_for_the_api(skipping_env):
    refusal = ApplicationError("installation 42 not found", type="INSTALLATION_NOT_FOUND", non_retryable=True)
    script = Script(clone=[refusal])
    request = connect_request()
    result = await run_connect(skipping_env, script, request)
    assert script.calls == [("clone", 1), ("record", 1)]
    assert result.error == "installation 42 not found" and result.error_code == "INSTALLATION_NOT_FOUND"
    assert script.records == [(request.client_id, "failed", None, "installation 42 not found")]


async def test_an_infrastructure_error_is_retried_then_the_clone_goes_on(skipping_env):
    script = Script(clone=[RuntimeError("disk full"), OSError("network unreachable")])
    result = await run_connect(skipping_env, script, connect_request())
    assert script.calls == [("clone", 1), ("clone", 2), ("clone", 3), ("record", 1)]
    assert result.default_branch == "main" and result.error is None


@pytest.mark.parametrize(
    "error",
    [RuntimeError("network unreachable"), ApplicationError("network unreachable", type="GITHUB_RATE_LIMITED")],
    ids=["python_error", "retryable_typed_error"],
)
async def test_a_clone_that_keeps_failing_ends_failed_without_a_code(skipping_env, error):
    """After INFRA_RETRY's three attempts; a retryable error's type is no refusal code."""
    script = Script(clone=[error] * 3)
    request = connect_request()
    result = await run_connect(skipping_env, script, request)
    assert script.calls == [("clone", 1), ("clone", 2), ("clone", 3), ("record", 1)]
    assert result.error == "network unreachable" and result.error_code is None
    assert script.records == [(request.client_id, "failed", None, "network unreachable")]


async def test_the_record_is_retried_through_a_database_outage(skipping_env):
    script = Script(outages=2)
    result = await run_connect(skipping_env, script, connect_request())
    assert [attempt for name, attempt in script.calls if name == "record"] == [1, 2, 3]
    assert result.error is None and len(script.records) == 1
