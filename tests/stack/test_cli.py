"""The `genesis` CLI as a real subprocess against the suite's real API process, worker, Postgres,
Redis, Docker and Temporal: propose and follow to a verdict, rejections and exit codes, --json,
mutations list, retry of an infrastructure failure, replay of histories (and precise reports of
a non-deterministic change), and the Evolution Feed / schedule commands."""

from __future__ import annotations

import asyncio
import json
import os
import re
import sys
import time
import uuid
from datetime import UTC
from pathlib import Path

import pytest
from temporalio.client import WorkflowExecutionStatus, WorkflowFailureError, WorkflowHistory
from temporalio.service import RPCError

from api.workflow_starter import mutation_input
from cli import replay as replaying
from genesis.config import PROJECT_ROOT
from genesis.db.models import Mutation
from genesis.workflow_api import MUTATION_WORKFLOW, rollback_workflow_id
from tests import agents, traits
from tests.cli_runs import invoke, record_history, run_cli, start_cli
from tests.nondeterministic_workflows import TaskWorkflowWithoutTimer
from tests.pipeline_steps import HISTORIES, sample, signal_window, wait_for_status, wait_for_verdict

STAGE_LINE = re.compile(r"●\s+(\w+)\s+≤?\+(\d+\.\d+)s")


def stages_of(output: str) -> list[str]:
    return [m.group(1) for m in STAGE_LINE.finditer(output)]


async def signal_when_activated(http, temporal_client, mutation_id: str, good: bool = True) -> None:
    """Close the observation window through the workflow's public signal (no engine in this module)."""
    await wait_for_status(http, mutation_id, {"activated"})
    after = sample(600, 110, 55.0, 2) if good else sample(600, 55, 31.0, 25)
    await signal_window(temporal_client, mutation_id, sample(300, 100, 50.0, 5), after)


def new_mutation_id(output: str) -> str:
    return re.search(r"mut_[0-9a-f]+", output).group(0)


async def test_register_propose_and_follow_a_good_trait_to_kept(api_url, http, temporal_client, tmp_path):
    code, out, err = await invoke(api_url, "agents", "register", "--name", "cli-agent", "--json")
    assert code == 0, err
    agent = json.loads(out)
    assert agent["agent_id"].startswith("agt_") and agent["api_key"].startswith("gen_")
    trait = tmp_path / "keeper.py"
    trait.write_text(traits.seeker(7001))

    process = await start_cli(
        api_url, "propose", str(trait), "--name", "cli_keeper", "--goal", "find food", key=agent["api_key"]
    )
    first = (await asyncio.wait_for(process.stdout.readline(), 30)).decode()
    mutation_id = new_mutation_id(first)
    await signal_when_activated(http, temporal_client, mutation_id)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    output = first + out.decode()
    assert process.returncode == 0, output + err.decode()
    assert stages_of(output) == ["queued", "validating", "sandbox_ok", "activated", "kept"], output
    times = [float(m.group(2)) for m in STAGE_LINE.finditer(output)]
    assert times == sorted(times) and times[-1] < 60
    assert "Sandbox: OK" in output and "kept:" in output and "fitness positive" in output
    assert "queued (" in output and "→ kept" in output  # the summary with each stage's duration

    # The same mutation as a script sees it; and its history replays through the CLI.
    code, out, _ = await invoke(api_url, "status", mutation_id, "--json")
    assert code == 0 and json.loads(out)["status"] == "kept"


async def test_replay_of_a_live_workflow_and_rollback_over_the_cli(api_url, http, temporal_client, settings, tmp_path):
    proposer = await agents.register(http, "cli-rollback")
    body = {"trait_name": "cli_rolled", "code": traits.seeker(7002), "goal": "x"}
    response = await http.post("/api/mutations/propose", json=body, headers=proposer.headers)
    mutation_id = response.json()["mutation_id"]
    await signal_when_activated(http, temporal_client, mutation_id)
    await wait_for_status(http, mutation_id, {"kept"})

    code, out, err = await run_cli(
        api_url, "workflows", "replay", f"mutation-{mutation_id}", "--json", settings=settings
    )
    assert code == 0, out + err
    report = json.loads(out)
    assert report["replayed"] == 1 and report["failed"] == 0
    assert report["reports"][0]["workflow_type"] == "MutationWorkflow"

    code, out, err = await invoke(api_url, "rollback", mutation_id, "--reason", "cli test", key=proposer.api_key)
    assert code == 0, err
    assert "rollback requested (cli test)" in out and "(was kept)" in out
    assert f"{mutation_id}: rolled_back" in out  # the command followed it to its end
    rolled = await wait_for_status(http, mutation_id, {"rolled_back"}, timeout_s=1)
    assert rolled["rollback_reason"] == "cli test"
    handle = temporal_client.get_workflow_handle(rollback_workflow_id(mutation_id))
    await handle.result()
    await record_history(temporal_client, rollback_workflow_id(mutation_id), "rollback_kept")
    code, out, err = await invoke(api_url, "rollback", mutation_id)  # no key: refused, clearly
    assert code == 1 and "API_KEY_REQUIRED" in err and "GENESIS_API_KEY" in err


async def test_rejected_trait_shows_its_failure_code_and_exits_nonzero(api_url, http, temporal_client, tmp_path):
    key = (await agents.agent(http)).api_key
    bad = tmp_path / "bad.py"
    bad.write_text(traits.FORBIDDEN_IMPORT.replace("hi", "cli"))
    code, out, err = await run_cli(api_url, "propose", str(bad), "--name", "cli_bad", key=key)
    assert code == 3, out + err
    assert "Rejected: AST_IMPORT_FORBIDDEN" in out
    assert re.search(r"Import whitelist: FAILED — Forbidden import: os", out)
    assert stages_of(out)[-1] == "rejected"
    await record_history(temporal_client, f"mutation-{new_mutation_id(out)}", "mutation_rejected_ast")

    raising = tmp_path / "raises.py"
    raising.write_text(
        traits.RAISES.replace("boom", "cli boom") if "boom" in traits.RAISES else traits.RAISES + "\n# cli\n"
    )
    code, out, err = await run_cli(api_url, "--json", "propose", str(raising), "--name", "cli_raises", key=key)
    assert code == 3, out + err
    result = json.loads(out)  # stdout is one JSON document; progress went to stderr
    assert result["status"] == "rejected" and result["failure_reason_code"] == "SANDBOX_EXCEPTION"
    assert [s["status"] for s in result["stages"]][-1] == "rejected"
    assert result["stages"][0]["status"] == "queued" and all("at_s" in s for s in result["stages"])
    await record_history(temporal_client, result["workflow_id"], "mutation_rejected_sandbox")

    # A retry of a verdict is refused: 409 over HTTP, exit 1 with the reason in the CLI.
    response = await http.post(f"/api/mutations/{result['mutation_id']}/retry", headers={"X-API-Key": key})
    assert response.status_code == 409 and response.json()["error"] == "NOT_RETRYABLE"
    assert "rejected on its merits (SANDBOX_EXCEPTION)" in response.json()["detail"]
    code, out, err = await invoke(api_url, "mutations", "retry", result["mutation_id"], key=key)
    assert code == 1 and "NOT_RETRYABLE" in err and "rejected on its merits" in err


async def test_list_and_json_outputs(api_url, http):
    lister = await agents.agent(http, "cli-lister")
    key = lister.api_key
    ids = []
    for variant in (7011, 7012):
        body = {"trait_name": f"cli_list_{variant}", "code": traits.FORBIDDEN_IMPORT.replace("hi", str(variant))}
        response = await http.post("/api/mutations/propose", json=body, headers={"X-API-Key": key})
        ids.append(response.json()["mutation_id"])
    for mutation_id in ids:
        await wait_for_verdict(http, mutation_id)
    code, out, err = await invoke(api_url, "mutations", "list", "--agent", lister.agent_id, "--json")
    assert code == 0, err
    listed = json.loads(out)["mutations"]
    assert [m["mutation_id"] for m in listed] == ids[::-1]  # newest first
    assert {m["status"] for m in listed} == {"rejected"}
    code, out, _ = await invoke(api_url, "mutations", "list", "--agent", lister.agent_id, "--status", "kept", "--json")
    assert json.loads(out) == {"mutations": [], "next_cursor": None}
    code, out, _ = await invoke(api_url, "mutations", "list", "--trait", "cli_list_7011", "--json")
    assert [m["mutation_id"] for m in json.loads(out)["mutations"]] == ids[:1]
    code, out, _ = await invoke(api_url, "mutations", "list", "--agent", lister.agent_id, "--limit", "1")
    assert code == 0 and ids[1] in out and ids[0] not in out and "1 mutation(s)" in out

    bad = await http.get("/api/mutations", params={"status": "done", "limit": 0})
    assert bad.status_code == 422 and bad.json()["error"] == "VALIDATION_ERROR"
    fields = {e["field"] for e in bad.json()["errors"]}
    assert fields == {"query.status", "query.limit"}, bad.json()
    code, out, err = await invoke(api_url, "mutations", "list", "--status", "done")
    assert code == 1 and "VALIDATION_ERROR" in err and "query.status" in err

    code, out, err = await invoke(api_url, "status", "mut_00000000dead")
    assert code == 1 and "MUTATION_NOT_FOUND" in err
    code, out, err = await invoke(api_url, "--json", "status", "mut_00000000dead")
    assert code == 1 and json.loads(out) == {
        "error": "MUTATION_NOT_FOUND",
        "detail": json.loads(out)["detail"],
        "status_code": 404,
    }
    code, out, err = await invoke(api_url, "status", "not-an-id")
    assert code == 2 and "not a mutation id" in err
    code, out, err = await invoke("http://127.0.0.1:9", "status", "mut_00000000dead")
    assert code == 1 and "cannot reach the Genesis API at http://127.0.0.1:9" in err

    code, out, err = await invoke(api_url, "world", "stats", "--json")  # no engine in this module
    if code == 0:
        assert "population" in json.loads(out)
    else:
        assert code == 1 and json.loads(out)["error"] == "ENGINE_NOT_RUNNING"


async def test_retry_reruns_a_terminated_mutation_to_its_verdict(api_url, http, temporal_client):
    from tests.webhook_receiver import Receiver

    receiver = Receiver()
    proposer = await agents.register(http, "cli-retry")
    body = {"trait_name": "cli_retried", "code": traits.seeker(7021), "notify_url": receiver.url}
    response = await http.post("/api/mutations/propose", json=body, headers=proposer.headers)
    mutation_id = response.json()["mutation_id"]
    handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
    deadline = time.monotonic() + 10
    while True:  # terminate it as soon as it exists: an infrastructure failure in the middle of the pipeline
        try:
            await handle.terminate("test: the worker's host died")
            break
        except RPCError:
            assert time.monotonic() < deadline, "the workflow never started"
            await asyncio.sleep(0.02)
    status = (await http.get(f"/api/mutations/{mutation_id}/status")).json()
    assert status["status"] in {"queued", "validating"}, status
    terminated = await handle.describe()
    assert terminated.status == WorkflowExecutionStatus.TERMINATED

    other = await agents.register(http, "cli-retry-other")
    refused = await http.post(f"/api/mutations/{mutation_id}/retry", headers=other.headers)
    assert refused.status_code == 403 and refused.json()["error"] == "NOT_YOUR_MUTATION"
    unknown = await http.post("/api/mutations/mut_00000000beef/retry", headers=proposer.headers)
    assert unknown.status_code == 404 and unknown.json()["error"] == "MUTATION_NOT_FOUND"

    process = await start_cli(api_url, "mutations", "retry", mutation_id, key=proposer.api_key)
    await signal_when_activated(http, temporal_client, mutation_id)
    out, err = await asyncio.wait_for(process.communicate(), 60)
    output = out.decode()
    assert process.returncode == 0, output + err.decode()
    assert "previous run: TERMINATED" in output
    assert stages_of(output) == ["queued", "validating", "sandbox_ok", "activated", "kept"], output
    description = await handle.describe()
    assert description.status == WorkflowExecutionStatus.COMPLETED
    assert description.run_id != terminated.run_id  # a new run under the same workflow id
    # The new run's webhooks carry its run in their ids: a receiver deduplicating on webhook-id keeps them.
    await receiver.wait_for(mutation_id, "kept")
    ids = [headers["webhook-id"] for headers, _ in receiver.calls]
    receiver.close()
    assert len(ids) == len(set(ids)), ids
    assert f"{mutation_id}.{description.run_id[:8]}.4" in ids, ids  # validating, sandbox_ok, activated, kept
    await record_history(temporal_client, f"mutation-{mutation_id}", "mutation_retried_kept")

    again = await http.post(f"/api/mutations/{mutation_id}/retry", headers=proposer.headers)
    assert again.status_code == 409 and again.json()["error"] == "NOT_RETRYABLE"
    assert "kept" in again.json()["detail"]


async def test_retry_of_a_live_or_running_mutation_is_refused(http, temporal_client):
    proposer = await agents.register(http, "cli-live")
    body = {"trait_name": "cli_live", "code": traits.seeker(7031)}
    mutation_id = (await http.post("/api/mutations/propose", json=body, headers=proposer.headers)).json()["mutation_id"]
    await wait_for_status(http, mutation_id, {"activated"})
    live = await http.post(f"/api/mutations/{mutation_id}/retry", headers=proposer.headers)
    assert live.status_code == 409 and live.json()["error"] == "NOT_RETRYABLE"
    assert "roll it back" in live.json()["detail"]
    await http.post(f"/api/mutations/{mutation_id}/rollback", headers=proposer.headers)
    await wait_for_status(http, mutation_id, {"rolled_back"})


async def test_retry_while_the_workflow_runs_is_refused(start_api, temporal_client):
    """An API whose task queue no worker polls: the workflow runs but never moves, the record
    stays queued; a retry is 409 MUTATION_IN_PROGRESS until the run is terminated."""
    import httpx

    url = await start_api("api-idle-queue", task_queue=f"idle-{uuid.uuid4().hex[:6]}")
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        proposer = await agents.register(client, "cli-idle")
        body = {"trait_name": "cli_idle", "code": traits.seeker(7041)}
        mutation_id = (await client.post("/api/mutations/propose", json=body, headers=proposer.headers)).json()[
            "mutation_id"
        ]
        handle = temporal_client.get_workflow_handle(f"mutation-{mutation_id}")
        deadline = time.monotonic() + 10
        while True:
            try:
                assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING
                break
            except RPCError:
                assert time.monotonic() < deadline, "the workflow never started"
                await asyncio.sleep(0.05)
        running = await client.post(f"/api/mutations/{mutation_id}/retry", headers=proposer.headers)
        assert running.status_code == 409 and running.json()["error"] == "MUTATION_IN_PROGRESS", running.text
        await handle.terminate("test")
        retried = await client.post(f"/api/mutations/{mutation_id}/retry", headers=proposer.headers)
        assert retried.status_code == 202, retried.text
        assert (
            retried.json()["previous_workflow_status"] == "TERMINATED" and retried.json()["previous_status"] == "queued"
        )
        # The new run stays running on the idle queue: the record is never swept onto the suite's worker.
        assert (await handle.describe()).status == WorkflowExecutionStatus.RUNNING


def test_recorded_histories_replay_through_the_cli():
    """Every history in tests/histories/ (every workflow type, GEPA's in gepa/) replays via
    `genesis workflows replay --file`."""
    import subprocess

    files = sorted(Path(HISTORIES).glob("*.json")) + sorted(Path(HISTORIES, "gepa").glob("*.json"))
    args = [a for f in files for a in ("--file", str(f))]
    done = subprocess.run(
        [sys.executable, "-m", "cli", "--json", "workflows", "replay", *args],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    assert report["replayed"] == len(files) and report["failed"] == 0
    types = {r["workflow_type"] for r in report["reports"]}
    assert {"MutationWorkflow", "TaskWorkflow", "GepaStepWorkflow", "GepaConnectWorkflow"} <= types


def test_a_changed_activity_is_reported_at_its_event(tmp_path):
    """A history whose recorded activity type differs from the code's (as after a rename) fails
    replay, and the CLI names the event, both activity types, and exits 7."""
    import subprocess

    source = json.loads(Path(HISTORIES, "mutation_kept.json").read_text())
    scheduled = next(e for e in source["events"] if e["eventType"] == "EVENT_TYPE_ACTIVITY_TASK_SCHEDULED")
    scheduled["activityTaskScheduledEventAttributes"]["activityType"]["name"] = "run_sandbox_test_v0"
    changed = tmp_path / "renamed.json"
    changed.write_text(json.dumps(source))
    done = subprocess.run(
        [sys.executable, "-m", "cli", "workflows", "replay", "--file", str(changed)],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "COLUMNS": "250"},
    )
    assert done.returncode == 7, done.stdout + done.stderr
    out = done.stdout
    assert "nondeterminism" in out
    assert f"at event {scheduled['eventId']} ACTIVITY_TASK_SCHEDULED (activity 'run_sandbox_test_v0')" in out
    assert "the current code issued activity 'run_sandbox_test'" in out
    assert "0/1 replayed cleanly" in out


async def test_a_nondeterministic_workflow_variant_is_reported_precisely():
    history = WorkflowHistory.from_json("task-expired", Path(HISTORIES, "task_expired.json").read_text())
    [good] = await replaying.replay([history])
    assert good.ok
    [report] = await replaying.replay([history], workflows=[TaskWorkflowWithoutTimer])
    assert not report.ok and report.error_kind == "nondeterminism"
    assert report.workflow_type == "TaskWorkflow"
    assert report.event is not None and report.event.event_type == "TIMER_STARTED" and report.event.kind == "timer"
    assert report.issued == "an activity command"
    assert [c.kind for c in report.commands][:2] == ["local activity", "timer"]
    assert "HistoryEvent(id: 6, TimerStarted)" in report.message


async def test_replay_of_failed_workflows_by_visibility_query(settings, temporal_client):
    """A MutationWorkflow started for a mutation with no record fails at its first status write;
    `replay --failed --since 1h` finds it through the visibility query and replays it."""
    mutation_id = f"mut_{uuid.uuid4().hex[:12]}"
    record = Mutation(
        mutation_id=mutation_id,
        agent_id="cli-orphan",
        trait_name="orphan",
        code="x = 1",
        goal="",
        task_id=None,
        notify_url=None,
        replaces_trait=None,
        replaces_version=None,
    )
    handle = await temporal_client.start_workflow(
        MUTATION_WORKFLOW,
        mutation_input(record, settings),
        id=f"mutation-{mutation_id}",
        task_queue=settings.task_queue,
    )
    with pytest.raises(WorkflowFailureError):
        await asyncio.wait_for(handle.result(), 30)
    assert (await handle.describe()).status == WorkflowExecutionStatus.FAILED
    await record_history(temporal_client, handle.id, "mutation_failed_no_record")
    deadline = time.monotonic() + 15
    while True:  # visibility is eventually consistent
        code, out, err = await run_cli(
            "http://127.0.0.1:9", "workflows", "replay", "--failed", "--since", "1h", "--json", settings=settings
        )
        report = json.loads(out)
        if any(r["workflow_id"] == handle.id for r in report["reports"]) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    assert code == 0, out + err
    assert any(r["workflow_id"] == handle.id and r["ok"] for r in report["reports"]), report
    code, out, err = await run_cli(
        "http://127.0.0.1:9", "workflows", "replay", "--failed", "--since", "yesterday", settings=settings
    )
    assert code == 2 and "not a duration" in err


async def test_feed_and_schedule_commands(api_url, http, settings):
    """Built against the Evolution Feed and Schedules contract; on an API without those
    endpoints the CLI says so clearly (404, not a stack trace)."""
    feed = await http.get("/api/feed", params={"limit": 5})
    code, out, err = await invoke(api_url, "watch", "--once", "--json")
    if feed.status_code == 404:
        assert code == 1 and "no such endpoint (404)" in out + err
    else:
        assert code == 0, err
        for line in out.splitlines():
            assert {"agent", "action", "message"} <= set(json.loads(line))
    schedules = await http.get("/api/schedules")
    code, out, err = await invoke(api_url, "schedule", "list")
    if schedules.status_code == 404:
        assert code == 1 and "GET /api/schedules" in err and "no such endpoint (404)" in err
        return
    schedule_id = f"cli-{uuid.uuid4().hex[:8]}"
    code, out, err = await invoke(api_url, "schedule", "create", "--interval", "3600", "--id", schedule_id)
    assert code == 1 and "OPERATOR_KEY_REQUIRED" in err and "GENESIS_OPERATOR_KEY" in err, err
    operator_key = (await agents.operator(settings)).key
    code, out, err = await invoke(
        api_url,
        "schedule",
        "create",
        "--interval",
        "3600",
        "--id",
        schedule_id,
        "--paused",
        "--json",
        operator_key=operator_key,
    )
    assert code == 0, err
    assert json.loads(out)["schedule_id"] == schedule_id and json.loads(out)["paused"] is True
    for verb in ("resume", "pause", "delete"):
        code, out, err = await invoke(api_url, "schedule", verb, schedule_id, operator_key=operator_key)
        assert code == 0, err


def test_up_dry_run_and_console_script():
    import subprocess
    import tomllib

    done = subprocess.run(
        [sys.executable, "-m", "cli", "up", "--dry-run"],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0
    assert done.stdout.splitlines() == [
        f"bash {PROJECT_ROOT / 'scripts' / 'services.sh'}",
        f"{sys.executable} -m cli.run",
    ]
    scripts = tomllib.loads((PROJECT_ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    assert scripts == {"genesis": "cli:app"}


def test_argument_parsing():
    from cli.mutations import parse_replaces

    assert parse_replaces(None, "hoarder") is None
    assert parse_replaces("live", "hoarder") == {"trait_name": "hoarder"}
    assert parse_replaces("hoarder", "hoarder") == {"trait_name": "hoarder"}
    assert parse_replaces("3", "hoarder") == parse_replaces("v3", "hoarder") == {"trait_name": "hoarder", "version": 3}
    assert parse_replaces("hoarder@2", "hoarder") == {"trait_name": "hoarder", "version": 2}
    for bad in ("other@2", "hoarder@two", "other"):
        with pytest.raises(Exception, match="--replaces"):
            parse_replaces(bad, "hoarder")
    assert replaying.parse_since("1d").total_seconds() == 86400
    assert replaying.parse_since("90m").total_seconds() == 5400
    for bad in ("0h", "1y", "", "yesterday"):
        with pytest.raises(ValueError, match="not a duration"):
            replaying.parse_since(bad)
    from datetime import datetime, timedelta

    now = datetime(2026, 11, 26, 3, 0, tzinfo=UTC)
    assert (
        replaying.failed_query(timedelta(days=1), now)
        == 'ExecutionStatus = "Failed" AND CloseTime > "2026-11-25T03:00:00Z"'
    )
