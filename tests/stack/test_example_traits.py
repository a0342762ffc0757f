"""The example traits (examples/traits/) through the real API, worker, gatekeeper and Docker
sandbox, proposed as their headers say by a registered agent: the good ones pass the sandbox
test, the rejected ones end with the failure code and log line their headers quote. The API runs
with activation off (GENESIS_ACTIVATE_MUTATIONS=false), so a pass ends at sandbox_ok and nothing
goes live in the session's world."""

from __future__ import annotations

import re

import httpx
import pytest

from cli.processes import worker_and_api
from tests import agents
from tests.example_traits import examples
from tests.own_stack import own_settings
from tests.pipeline_steps import wait_for_verdict

GOAL = re.compile(r'--goal "([^"]*)"')


@pytest.fixture(scope="module")
async def no_activation_api(settings):
    own = await own_settings(settings, "example_traits", activate_mutations=False)
    async with worker_and_api(own, "example-traits") as url:
        yield url


async def test_the_examples_get_the_verdicts_their_headers_state(no_activation_api):
    async with httpx.AsyncClient(base_url=no_activation_api, timeout=30) as http:
        agent = await agents.register(http, "example-traits", "proposes examples/traits/")
        proposed = []
        for example in examples():
            goal = GOAL.search(example.header)
            body = {"trait_name": example.trait_name, "goal": goal.group(1) if goal else "", "code": example.code}
            response = await http.post("/api/mutations/propose", json=body, headers=agent.headers)
            assert response.status_code == 202, (example.path.name, response.text)
            proposed.append((example, response.json()["mutation_id"]))
        assert len(proposed) >= 5
        for example, mutation_id in proposed:
            status = await wait_for_verdict(http, mutation_id, timeout_s=120)
            assert status["agent_id"] == agent.agent_id and status["trait_name"] == example.trait_name
            if example.failure_code is None:
                assert status["status"] == "sandbox_ok", (example.path.name, status)
                assert status["validation_log"][-1].startswith("Sandbox: OK — "), status["validation_log"]
                assert status["sandbox_report"], status
            else:
                assert status["status"] == "rejected", (example.path.name, status)
                assert status["failure_reason_code"] == example.failure_code, status
                failed = next(line for line in status["validation_log"] if "FAILED" in line)
                assert " ".join(failed.split()) in example.header, (failed, example.header)
