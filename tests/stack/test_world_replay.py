"""Verifying the world's history through the API and the CLI: GET /v1/world/replay/verify runs a
replay in the worker (ReplayVerifyWorkflow, no trait host), `genesis world replay` follows it; a
journal whose live run was perturbed is reported at the tick, Molbot and field; and an audit
export with its signed manifest verifies offline with `genesis audit verify`, a tampered one not."""

from __future__ import annotations

import asyncio
import hashlib
import json
import shutil
import time

import pytest

from audit import projection
from engine.core.world import World
from genesis import redis_keys as keys
from tests import agents
from tests.cli_runs import invoke, record_history
from tests.journal_worlds import journal_settings, run_journaled


async def verified(http, params: dict, timeout_s: float = 120) -> dict:
    deadline = time.monotonic() + timeout_s
    while True:
        answer = await http.get("/v1/world/replay/verify", params=params)
        if answer.status_code != 202:
            return answer
        body = answer.json()
        assert body["state"] == "running" and answer.headers["Retry-After"]
        assert time.monotonic() < deadline, "the replay did not finish"
        await asyncio.sleep(0.5)


async def last_run(temporal_client, workflow_type: str) -> str:
    """The id of the newest completed run of a workflow type (visibility lags a moment: polled)."""
    query = f'WorkflowType = "{workflow_type}" AND ExecutionStatus = "Completed"'
    deadline = time.monotonic() + 15
    while not (runs := [wf async for wf in temporal_client.list_workflows(query)]):
        assert time.monotonic() < deadline, f"no completed {workflow_type}"
        await asyncio.sleep(0.5)
    return max(runs, key=lambda wf: wf.start_time).id


class CosmicRay(World):
    """A live world changed outside its rules at tick 420: one Molbot's speed."""

    def step(self, intents=None, lazy_write_back=False, forced=None):
        report = super().step(intents, lazy_write_back, forced)
        if self.tick == 420:
            entity = self.entities[sorted(self.entities)[3]]
            entity.speed = entity.speed * 0.5
            self._columns = None
        return report


@pytest.fixture
async def operator_key(settings) -> str:
    return (await agents.operator(settings)).key


async def test_replay_verification_through_the_api_and_the_cli(
    settings, operator_http, http, api_url, operator_key, redis_client, temporal_client
):
    journal_dir = settings.journal_dir
    shutil.rmtree(journal_dir, ignore_errors=True)
    await run_journaled(journal_settings(journal_dir, 21, journal_snapshot_interval=200), 700)

    answer = await verified(operator_http, {"from": 0, "to": 700})
    assert answer.status_code == 200, answer.text
    report = answer.json()
    assert report["equal"] and report["ticks_checked"] == 700 and report["divergence"] is None
    await record_history(temporal_client, await last_run(temporal_client, "ReplayVerifyWorkflow"), "replay_verified")
    code, out, _ = await invoke(
        api_url, "world", "replay", "--from-tick", "250", "--to-tick", "650", operator_key=operator_key
    )
    assert code == 0 and "equal" in out and "no trait host" in out, out

    # an end past the running world's tick is pinned there when first asked: one replay, found again
    await redis_client.hset(keys.ENGINE_STATUS, mapping={"tick": 500, "updated_at": time.time()})
    try:
        first = await operator_http.get("/v1/world/replay/verify", params={"from": 100, "to": 10**9})
        assert first.status_code in (200, 202) and first.json()["to_tick"] == 500, first.text
        if first.status_code == 202:
            assert first.json()["workflow_id"].endswith("-100-500")
        pinned = await verified(operator_http, {"from": 100, "to": first.json()["to_tick"]})
        assert pinned.status_code == 200 and pinned.json()["last_tick_checked"] == 500, pinned.text
    finally:
        await redis_client.delete(keys.ENGINE_STATUS)

    for params, words in (({"from": 9, "to": 3}, "must be >="), ({"from": -1, "to": 3}, "from"), ({"to": 3}, "from")):
        bad = await operator_http.get("/v1/world/replay/verify", params=params)
        assert bad.status_code == 422 and words in bad.text, bad.text
    assert (await http.get("/v1/world/replay/verify", params={"from": 0, "to": 1})).status_code == 401
    past = await verified(operator_http, {"from": 5000, "to": 6000})
    assert past.status_code == 409 and "ends at tick 700" in past.json()["detail"]

    # a live run perturbed at tick 420: reported at that tick, with the Molbot and the field
    shutil.rmtree(journal_dir)
    await run_journaled(journal_settings(journal_dir, 21, journal_snapshot_interval=200), 700, world_cls=CosmicRay)
    answer = await verified(operator_http, {"from": 300, "to": 699})
    report = answer.json()
    assert answer.status_code == 200 and not report["equal"], report
    divergence = report["divergence"]
    assert divergence["tick"] == 420
    (speed,) = [d for d in divergence["differences"] if d["field"] == "speed"]
    assert speed["entity"] is not None and speed["replayed"] == 2 * speed["recorded"]
    code, out, _ = await invoke(
        api_url, "world", "replay", "--from-tick", "300", "--to-tick", "698", operator_key=operator_key
    )
    assert code == 1 and "diverges" in out and "tick 420" in out and "speed" in out, out


async def test_an_audit_export_verifies_offline_and_a_tampered_one_does_not(
    settings, operator_http, api_url, operator_key, tmp_path, temporal_client
):
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
    from sqlalchemy.pool import NullPool

    journal = tmp_path / "journal"
    await run_journaled(journal_settings(journal, 33, journal_snapshot_interval=100), 500)
    engine = create_async_engine(settings.database_url, poolclass=NullPool)
    try:
        await projection.rebuild(async_sessionmaker(engine, expire_on_commit=False), journal)
    finally:
        await engine.dispose()
    out_file, keys_file = tmp_path / "audit.ndjson", tmp_path / "keys.json"
    code, out, _ = await invoke(api_url, "audit", "export", "--out", str(out_file), operator_key=operator_key)
    assert code == 0 and "event(s) written" in out, out
    await record_history(temporal_client, await last_run(temporal_client, "AuditManifestWorkflow"), "audit_signed")
    last = json.loads(out_file.read_text().splitlines()[-1])
    assert last["receipt"] is not None and last["receipt"]["kind"] == "audit.export"
    keys_file.write_text((await operator_http.get("/v1/keys")).text)
    code, out, _ = await invoke(api_url, "audit", "verify", str(out_file), "--keys", str(keys_file))
    assert code == 0 and "manifest signed and matching" in out, out
    against_journal = ("--keys", str(keys_file), "--journal", str(journal))
    code, out, _ = await invoke(api_url, "audit", "verify", str(out_file), *against_journal)
    count = len(out_file.read_text().splitlines()) - 1
    assert code == 0 and f"journal: {count} of {count} event(s) derived again" in out, out
    assert "none missing from its range" in out, out
    sampled = ("--sample", "3", "--seed", "7")
    code, out, _ = await invoke(api_url, "audit", "verify", str(out_file), *against_journal, *sampled)
    assert code == 0 and f"3 of {count} event(s)" in out and "seed 7" in out, out

    # The database is not the trust root: an export whose rows were changed in Postgres, and then
    # honestly signed, verifies as an export and fails against the journal.
    lines = out_file.read_text().splitlines()
    forged = tmp_path / "forged.ndjson"
    changed = json.loads(lines[1])
    changed["cause"] = "rewritten in the database"
    events = [changed if i == 1 else json.loads(line) for i, line in enumerate(lines[:-1])]
    del events[2]  # and one left out
    forged_lines = [json.dumps(e, separators=(",", ":"), sort_keys=True) for e in events]
    manifest = {**json.loads(lines[-1])["manifest"], "count": len(events)}
    manifest["events_sha256"] = hashlib.sha256("".join(line + "\n" for line in forged_lines).encode()).hexdigest()
    forged.write_text("\n".join([*forged_lines, json.dumps({"manifest": manifest, "receipt": None})]) + "\n")
    code, out, _ = await invoke(api_url, "audit", "verify", str(forged), *against_journal)
    assert code == 1 and "its cause is not the journal's" in out and "is in the journal, not in the export" in out, out
    lines = out_file.read_text().splitlines()
    event = json.loads(lines[1])
    event["cause"] = "someone else"
    lines[1] = json.dumps(event, separators=(",", ":"), sort_keys=True)
    out_file.write_text("\n".join(lines) + "\n")
    code, out, _ = await invoke(api_url, "audit", "verify", str(out_file), "--keys", str(keys_file))
    assert code == 1 and "sha256 differs" in out, out
    code, out, _ = await invoke(
        api_url, "audit", "events", "--kind", "trait.arrived", "--json", operator_key=operator_key
    )
    assert code == 0 and {e["kind"] for e in json.loads(out)["events"]} == {"trait.arrived"}
