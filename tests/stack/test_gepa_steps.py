"""GEPA optimisation steps end to end: connect a local git repository, run prompt mutations
(20 at once), follow a parent's branch, async steps, and every bad input ending as ``failed``
with a clear error and nothing left checked out. Real Temporal, Postgres, Docker, git and a
scripted LM behind a real HTTP server."""

from __future__ import annotations

import asyncio
import json
import os
from pathlib import Path

import pytest
from temporalio.client import WorkflowHistory

from doubles.scripted_lm import transform
from gepa_steps.connect_workflow import GepaConnectWorkflow
from gepa_steps.step_workflow import GepaStepWorkflow
from tests import agents
from tests.gepa_requests import QUESTION, branches, git_show, step
from tests.gepa_stack import wait_for_program
from tests.replays import assert_replays


async def test_twenty_concurrent_prompt_steps_each_on_its_own_branch(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    ids = [f"concurrent{i}" for i in range(20)]
    candidates = {
        pid: f"Answer the question. PREFIX=tag{i}" + (" UPPERCASE" if i % 2 else "") for i, pid in enumerate(ids)
    }
    responses = await asyncio.gather(
        *(
            gepa_http.post(
                "/execute_step", json=step(client_id, pid, candidate={"answer": candidates[pid]}, capture_traces=True)
            )
            for pid in ids
        )
    )
    clone = gepa_stack.clone_of(client_id)
    for pid, response in zip(ids, responses):
        assert response.status_code == 200, response.text
        result = response.json()
        assert result["status"] == "success", result
        assert result["branch_name"] == f"program_{pid}"
        # The output depends on the candidate: the scripted LM follows the instructions it was given.
        assert [o["output"]["answer"] for o in result["pipeline_outputs"]] == [
            transform(QUESTION, candidates[pid]),
            transform("second", candidates[pid]),
        ]
        assert result["program_json"]["answer"]["signature"]["instructions"] == candidates[pid]
        assert result["traces"][0]["steps"][0]["predictor"] == "answer"
        assert result["traces"][0]["steps"][0]["inputs"] == {"question": QUESTION}
        committed = json.loads(git_show(clone, f"program_{pid}:program.json"))
        assert committed["answer"]["signature"]["instructions"] == candidates[pid]
        assert f"GEPA prompt mutation {pid}" in git_show(clone, f"program_{pid}")
    listed = (await gepa_http.get(f"/program/{ids[3]}")).json()
    assert listed["status"] == "completed" and listed["client_id"] == client_id
    assert listed["result"]["pipeline_outputs"] == responses[3].json()["pipeline_outputs"]
    # Worktree policy: the worktrees are gone, the branches stay.
    assert not any((clone.parent / "worktrees").iterdir())
    assert set(f"program_{pid}" for pid in ids) <= set(branches(clone))
    # The LM key was added by the egress gateway, outside the container.
    assert {call["authorization"] for call in gepa_stack.lm.calls if call["path"].endswith("/chat/completions")} >= {
        "Bearer sk-test-lm-key"
    }


async def test_a_child_starts_from_its_parents_branch_and_repeats_are_idempotent(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    parent = await gepa_http.post(
        "/execute_step", json=step(client_id, "parent1", candidate={"answer": "UPPERCASE please"})
    )
    assert parent.json()["status"] == "success"
    child = await gepa_http.post(
        "/execute_step", json=step(client_id, "child1", parent_program_id="parent1", candidate={})
    )
    result = child.json()
    assert result["status"] == "success", result
    # No candidate: the child runs its parent's instructions, inherited through git.
    assert result["program_json"]["answer"]["signature"]["instructions"] == "UPPERCASE please"
    assert result["pipeline_outputs"][0]["output"]["answer"] == QUESTION.upper()
    assert "(parent parent1)" in git_show(gepa_stack.clone_of(client_id), "program_child1")
    again = await gepa_http.post(
        "/execute_step", json=step(client_id, "child1", parent_program_id="parent1", candidate={})
    )
    assert again.json() == result
    program = (await gepa_http.get("/program/child1")).json()
    assert program["parent_program_id"] == "parent1" and program["branch_name"] == "program_child1"


async def test_steps_and_connections_are_limited_per_caller(gepa_stack, gepa_http, gepa_client_id, temporal_client):
    """A caller over its hour's steps or connections gets 429 with Retry-After, and nothing is
    recorded; a repeat of a finished step is an answer, not a new step, so it is not counted."""
    import redis.asyncio as aioredis

    from genesis.redis_keys import ratelimit_gepa_hour

    done = await gepa_http.post("/execute_step", json=step(gepa_client_id, "limited0"))
    assert done.json()["status"] == "success", done.json()
    deadline = asyncio.get_running_loop().time() + 15  # found by its program (and agent) in the Temporal UI
    query = f'GenesisProgramId = "limited0" AND GenesisAgentId = "{gepa_stack.agent.agent_id}"'
    while not [wf async for wf in temporal_client.list_workflows(query)]:
        assert asyncio.get_running_loop().time() < deadline, query
        await asyncio.sleep(0.5)
    redis = aioredis.from_url(gepa_stack.settings.redis_url)
    full = {"step": gepa_stack.settings.ratelimit.gepa_steps_per_client_hour}
    full["connect"] = gepa_stack.settings.ratelimit.gepa_connects_per_client_hour
    try:
        for action, limit in full.items():
            await redis.set(ratelimit_gepa_hour(action, f"agent:{gepa_stack.agent.agent_id}"), limit, ex=600)
        refused = await gepa_http.post("/execute_step", json=step(gepa_client_id, "limited1"))
        assert refused.status_code == 429 and refused.json()["error"] == "RATE_LIMIT_EXCEEDED", refused.text
        assert "Too many GEPA steps from agent_id" in refused.json()["detail"]
        assert 0 < int(refused.headers["Retry-After"]) <= 600
        assert (await gepa_http.get("/program/limited1")).status_code == 404  # nothing recorded
        again = await gepa_http.post("/execute_step", json=step(gepa_client_id, "limited0"))
        assert again.status_code == 200 and again.json() == done.json()
        connect = await gepa_http.post("/connect-git", json={"repo_url": str(gepa_stack.repo)})
        assert connect.status_code == 429 and "Too many repository connections" in connect.json()["detail"]
    finally:
        for action in full:
            await redis.delete(ratelimit_gepa_hour(action, f"agent:{gepa_stack.agent.agent_id}"))
        await redis.aclose()


async def test_async_step_answers_202_and_the_program_endpoint_follows_it(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    response = await gepa_http.post(
        "/execute_step?async=true", json=step(client_id, "async1", candidate={"answer": "REVERSED"})
    )
    assert response.status_code == 202, response.text
    accepted = response.json()
    assert accepted["status_url"] == "/program/async1" and accepted["workflow_id"] == "gepa-async1"
    program = await wait_for_program(gepa_http, "async1")
    assert program["status"] == "completed", program
    assert program["result"]["pipeline_outputs"][0]["output"]["answer"] == QUESTION[::-1]


async def test_bad_inputs_fail_clearly_and_leave_nothing_locked(gepa_stack, gepa_http, gepa_client_id):
    client_id = gepa_client_id
    clone = gepa_stack.clone_of(client_id)

    unknown = await gepa_http.post("/execute_step", json=step("client_00000000deadbeef", "bad0"))
    assert unknown.status_code == 404
    assert unknown.json()["status"] == "failed" and unknown.json()["error"] == "CLIENT_NOT_FOUND"
    assert "unknown client_id 'client_00000000deadbeef'" in unknown.json()["detail"]

    cases = {
        "bad1": (
            step(client_id, "bad1", program_json_path="missing/program.json"),
            "missing/program.json does not exist",
        ),
        "bad2": (step(client_id, "bad2", candidate={"nope": "x"}), "unknown component(s) ['nope']"),
        "bad3": (step(client_id, "bad3", entry_point="broken.Broken"), "ValueError: this program always fails"),
        "bad4": (step(client_id, "bad4", parent_program_id="never-ran"), "unknown parent_program_id 'never-ran'"),
        "bad5": (step(client_id, "bad5", entry_point="qa.Missing"), "module 'qa' has no 'Missing'"),
    }
    responses = await asyncio.gather(*(gepa_http.post("/execute_step", json=body) for body, _ in cases.values()))
    for (pid, (_, expected)), response in zip(cases.items(), responses):
        result = response.json()
        assert response.status_code == 200 and result["status"] == "failed", result
        assert expected in result["error"], (pid, result["error"])
        assert not result["error"].startswith("GEPA_STEP_FAILED")  # the message itself, not Temporal's error type
        program = (await gepa_http.get(f"/program/{pid}")).json()
        assert program["status"] == "failed" and expected in program["error"]
        assert f"program_{pid}" not in branches(clone)
    assert not any((clone.parent / "worktrees").iterdir())
    # Nothing is locked: the same program id runs again, now with good input.
    fixed = await gepa_http.post("/execute_step", json=step(client_id, "bad1"))
    assert fixed.json()["status"] == "success", fixed.json()

    invalid = await gepa_http.post("/execute_step", json=step(client_id, "../etc"))
    assert invalid.status_code == 422 and "program_id" in invalid.json()["detail"]
    outside = await gepa_http.post("/connect-git", json={"repo_url": "/etc"})
    assert outside.status_code == 422 and "not under an allowed directory" in outside.json()["detail"]
    ssh = await gepa_http.post("/connect-git", json={"repo_url": "ext::sh -c touch% /tmp/pwned"})
    assert ssh.status_code == 422 and "not supported" in ssh.json()["detail"]
    assert (await gepa_http.get("/program/nope-never")).status_code == 404


GEPA_HISTORIES = Path(__file__).parents[1] / "histories" / "gepa"
GEPA_WORKFLOWS = [GepaStepWorkflow, GepaConnectWorkflow]


async def check_replay(temporal_client, workflow_id: str, name: str) -> None:
    """The finished run replays against the current code; GENESIS_RECORD_HISTORIES=1 also keeps
    it in tests/histories/gepa/, replayed by every later run."""
    history = await temporal_client.get_workflow_handle(workflow_id).fetch_history()
    await assert_replays(history, GEPA_WORKFLOWS)
    if os.environ.get("GENESIS_RECORD_HISTORIES"):
        GEPA_HISTORIES.mkdir(parents=True, exist_ok=True)
        (GEPA_HISTORIES / f"{name}.json").write_text(history.to_json())


async def test_finished_steps_replay_deterministically(gepa_stack, gepa_http, gepa_client_id, temporal_client):
    client_id = gepa_client_id
    ok = await gepa_http.post("/execute_step", json=step(client_id, "replay-ok"))
    failed = await gepa_http.post("/execute_step", json=step(client_id, "replay-failed", entry_point="broken.Broken"))
    assert ok.json()["status"] == "success" and failed.json()["status"] == "failed"
    await check_replay(temporal_client, "gepa-replay-ok", "step_success")
    await check_replay(temporal_client, "gepa-replay-failed", "step_failed")
    await check_replay(temporal_client, f"gepa-connect-{client_id}", "connect")


@pytest.mark.parametrize("path", sorted(GEPA_HISTORIES.glob("*.json")), ids=lambda p: p.name)
async def test_recorded_gepa_histories_replay(path):
    history = WorkflowHistory.from_json(f"recorded-{path.name}", path.read_text())
    await assert_replays(history, GEPA_WORKFLOWS)


async def test_a_client_is_used_only_by_the_agent_that_connected_it(gepa_stack, gepa_http, gepa_client_id):
    assert (await gepa_http.post("/execute_step", json=step(gepa_client_id, "owned1"))).json()["status"] == "success"
    stranger = await agents.register(gepa_http, "gepa-stranger")
    foreign = await gepa_http.post("/execute_step", json=step(gepa_client_id, "stolen1"), headers=stranger.headers)
    assert foreign.status_code == 404 and foreign.json()["error"] == "CLIENT_NOT_FOUND"
    assert (await gepa_http.get("/program/owned1", headers=stranger.headers)).status_code == 404
    keyless = await gepa_http.post("/execute_step", json=step(gepa_client_id, "stolen2"), headers={"X-API-Key": ""})
    assert keyless.status_code == 401 and keyless.json()["error"] == "API_KEY_REQUIRED"


async def test_a_step_survives_its_worker_being_killed_mid_run(gepa_stack, gepa_http, gepa_client_id):
    response = await gepa_http.post(
        "/execute_step?async=true",
        json=step(
            gepa_client_id,
            "survivor1",
            entry_point="slow.Slow",
            candidate={"answer": "UPPERCASE"},
            test_examples=[{"question": "still here"}],
        ),
    )
    assert response.status_code == 202
    deadline = asyncio.get_running_loop().time() + 60
    while (await gepa_http.get("/program/survivor1")).json().get("progress") != "running the program":
        assert asyncio.get_running_loop().time() < deadline, "the step never reached its run"
        await asyncio.sleep(0.2)
    await asyncio.sleep(1.0)  # inside the program's sleep
    gepa_stack.worker.kill()  # SIGKILL: its program hosts lose their stdin and exit with it
    gepa_stack.worker.start()
    program = await wait_for_program(gepa_http, "survivor1", timeout=120)
    assert program["status"] == "completed", program
    assert program["result"]["pipeline_outputs"][0]["output"]["answer"] == "STILL HERE"
    assert branches(gepa_stack.clone_of(gepa_client_id)).count("program_survivor1") == 1
