"""The proposal row is the outbox: a proposal is answered once recorded, and its workflow starts
right after — or, when Temporal cannot be reached, later, by a sweeper (api/workflow_starter.py)."""

from __future__ import annotations

import asyncio

import httpx

from cli.processes import free_port
from tests import agents, traits
from tests.pipeline_steps import wait_for_status


async def test_a_proposal_made_while_temporal_is_down_is_kept_and_started_when_it_is_back(start_api, http):
    # An API process whose Temporal is unreachable (and which never sweeps itself).
    down_url = await start_api(
        "api-temporal-down", temporal_address=f"127.0.0.1:{free_port()}", workflow_start_sweep_s=3600
    )
    proposer = await agents.agent(http, "outbox-agent")
    body = {"trait_name": "outbox_seeker", "goal": "survive an outage", "code": traits.unique_seeker()}
    async with httpx.AsyncClient(base_url=down_url, timeout=30) as down:
        response = await down.post("/api/mutations/propose", json=body, headers=proposer.headers)
    assert response.status_code == 202, response.text
    mutation_id = response.json()["mutation_id"]

    await asyncio.sleep(1.5)  # its background start failed: nothing runs, nothing is lost
    status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
    assert status["status"] == "queued" and status["code_hash"] is None

    # Temporal is reachable again (here: from another API process); its sweep starts the workflow.
    await start_api("api-sweeper", workflow_start_sweep_s=0.5, workflow_start_stale_s=1.0)
    final = await wait_for_status(http, mutation_id, {"sandbox_ok", "activated", "kept", "rolled_back"}, timeout_s=90)
    assert any(line.startswith("Sandbox: OK") for line in final["validation_log"]), final


async def test_propose_answers_before_the_workflow_starts_and_it_still_runs(http):
    proposer = await agents.agent(http, "outbox-agent")
    body = {"trait_name": "prompt_seeker", "goal": "the normal path", "code": traits.unique_seeker()}
    response = await http.post("/api/mutations/propose", json=body, headers=proposer.headers)
    assert response.status_code == 202 and response.json()["status"] == "queued"
    status = await wait_for_status(
        http, response.json()["mutation_id"], {"sandbox_ok", "activated", "kept"}, timeout_s=60
    )
    assert status["workflow_id"] == f"mutation-{status['mutation_id']}"
