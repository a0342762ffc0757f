"""Audit of the journal through the API: the projection in Postgres (audit/projection.py) of a real
journal, queried by filters with paging that hands out each event once while the engine appends,
exported as NDJSON equal to the query, per-agent timelines, and a projection rebuilt from the
journal equal to the one kept up as it went."""

from __future__ import annotations

import json
import random

import pytest

from audit import projection
from engine.process.loop import Engine
from journal.audit import EVENT_KINDS
from tests import agents
from tests.cli_runs import invoke
from tests.journal_worlds import journal_settings, journaled_engine


@pytest.fixture
async def sessions(settings):
    """Sessions on an engine of this test's own (no pool kept between tests: an app another test
    runs in a thread of its own must never be handed a connection of this event loop)."""
    from sqlalchemy.ext.asyncio import async_sessionmaker, create_async_engine
    from sqlalchemy.pool import NullPool

    engine = create_async_engine(settings.database_url, poolclass=NullPool)
    yield async_sessionmaker(engine, expire_on_commit=False)
    await engine.dispose()


async def run_with_rollback(tmp_path, ticks: int, agents: dict[str, str] | None = None) -> Engine:
    engine = journaled_engine(journal_settings(tmp_path, 9, journal_snapshot_interval=100), agents=agents)
    try:
        await engine.run_ticks(ticks)
        engine.request_rollback({"request_id": "rbk_00000000000000aa", "tick": 250, "reason": "audit test"})
        await engine.run_ticks(60)
    finally:
        await engine.close()
        engine.journal.close()
    return engine


async def every_receipt(http, **params) -> list[dict]:
    """Every receipt of the chain (other tests' too), page by page."""
    found, cursor = [], None
    while True:
        page = (
            await http.get("/v1/receipts", params={**params, "limit": 500, **({"cursor": cursor} if cursor else {})})
        ).json()
        found += page["receipts"]
        if (cursor := page["next_cursor"]) is None:
            return found


async def all_events(http, **params) -> list[dict]:
    events, cursor = [], None
    while True:
        answer = (
            await http.get("/v1/audit/events", params={**params, "limit": 7, **({"cursor": cursor} if cursor else {})})
        ).json()
        events += answer["events"]
        cursor = answer["next_cursor"]
        if cursor is None:
            return events


async def test_the_journal_is_audited_by_kind_tick_agent_mutation_trait_epoch_and_cause(
    operator_http, http, sessions, tmp_path
):
    await run_with_rollback(tmp_path, 500)
    assert await projection.rebuild(sessions, tmp_path) > 560
    events = await all_events(operator_http)
    kinds = [e["kind"] for e in events]
    assert kinds[0] == "world.created" and "engine.started" in kinds and "world.rollback" in kinds
    assert [(e["seq"], e["index"]) for e in events] == sorted({(e["seq"], e["index"]) for e in events})
    arrived = [e for e in events if e["kind"] == "trait.arrived"]
    assert {e["trait_name"] for e in arrived} == {"forager", "labeller", "wanderer"}
    assert all(e["agent_id"] == f"agent-{e['trait_name']}" for e in arrived)
    left = [e for e in events if e["kind"] == "trait.left"]
    assert left and left[0]["trait_name"] == "labeller" and left[0]["cause"] == "deregistered"
    assert left[0]["mutation_id"] == "mut_1abe01" and left[0]["agent_id"] == "agent-labeller"  # filled in
    (rollback,) = [e for e in events if e["kind"] == "world.rollback"]
    assert rollback["cause"] == "audit test" and rollback["epoch"] == 1 and rollback["summary"]["from_tick"] == 500

    by = lambda **p: all_events(operator_http, **p)  # noqa: E731
    assert [e["kind"] for e in await by(kind="world.rollback")] == ["world.rollback"]
    assert {e["trait_name"] for e in await by(trait="labeller")} == {"labeller"}
    assert {e["agent_id"] for e in await by(agent_id="agent-forager")} == {"agent-forager"}
    assert all(e["epoch"] == 1 for e in await by(epoch=1)) and await by(epoch=1)
    assert all(100 <= e["tick"] <= 300 for e in await by(from_tick=100, to_tick=300))
    assert all(e["cause"] == "deregistered" for e in await by(cause="deregistered"))
    assert await by(mutation_id="mut_1abe02")

    # export equals query, for random filters
    rng = random.Random(3)
    for _ in range(6):
        params = {}
        if rng.random() < 0.5:
            params["kind"] = rng.sample(list(EVENT_KINDS)[:6], 2)
        if rng.random() < 0.5:
            params["from_tick"] = rng.randrange(0, 400)
        if rng.random() < 0.3:
            params["trait"] = rng.choice(["forager", "labeller", "wanderer"])
        queried = await all_events(operator_http, **params)
        answer = await operator_http.get("/v1/audit/export", params=params)
        assert answer.status_code == 200 and answer.headers["content-type"].startswith("application/x-ndjson")
        lines = [json.loads(line) for line in answer.text.splitlines()]
        manifest = lines[-1]["manifest"]
        assert lines[:-1] == queried and manifest["count"] == len(queried)
        assert manifest["first_seq"] == (queried[0]["seq"] if queried else None)

    # bad filters say what is wrong; operators only
    for params, words in (({"kind": "nope"}, "unknown event kind"), ({"from_seq": 9, "to_seq": 2}, "to_seq")):
        answer = await operator_http.get("/v1/audit/events", params=params)
        assert answer.status_code == 422 and words in answer.text
    assert (await http.get("/v1/audit/events")).status_code == 401


async def test_paging_hands_out_each_event_once_while_the_engine_appends(operator_http, sessions, tmp_path):
    """Between two pages the world goes back to tick 100 and runs past 150 again (a rollback and
    the labeller leaving: new events at the journal's end); the walk sees every event once."""
    engine = journaled_engine(journal_settings(tmp_path, 12, journal_snapshot_interval=50))
    seen: list[tuple[int, int]] = []
    cursor = None
    try:
        await engine.run_ticks(300)
        await projection.rebuild(sessions, tmp_path)
        for turn in range(40):
            params = {"limit": 2, **({"cursor": cursor} if cursor else {})}
            answer = (await operator_http.get("/v1/audit/events", params=params)).json()
            seen += [(e["seq"], e["index"]) for e in answer["events"]]
            cursor = answer["next_cursor"]
            if cursor is None:
                break
            if turn < 6:
                engine.request_rollback({"request_id": f"rbk_{turn:016x}", "tick": 100, "reason": f"turn {turn}"})
                await engine.run_ticks(100)
                engine._flush_telemetry()
                await projection.project(sessions, tmp_path)
    finally:
        await engine.close()
        engine.journal.close()
    assert cursor is None, "the walk did not reach the end"
    assert len(seen) == len(set(seen)) and seen == sorted(seen)
    everything = {(e["seq"], e["index"]) for e in await all_events(operator_http)}
    assert set(seen) == everything  # the events appended during the walk came after its position
    rollbacks = await all_events(operator_http, kind="world.rollback")
    assert len(rollbacks) == 6 and [e["epoch"] for e in rollbacks] == [1, 2, 3, 4, 5, 6]


async def test_an_agent_reads_its_own_timeline_only(http, operator_http, sessions, tmp_path, settings, api_url):
    mine = await agents.register(http, "timeline-mine")
    other = await agents.register(http, "timeline-other")
    await run_with_rollback(tmp_path, 300, {"forager": mine.agent_id, "labeller": "x", "wanderer": "y"})
    await projection.rebuild(sessions, tmp_path)
    answer = await http.get(f"/v1/agents/{mine.agent_id}/timeline", headers=mine.headers)
    assert answer.status_code == 200, answer.text
    assert all(e["agent_id"] == mine.agent_id for e in answer.json()["events"])
    denied = await http.get(f"/v1/agents/{mine.agent_id}/timeline", headers=other.headers)
    assert denied.status_code == 403
    assert (await http.get(f"/v1/agents/{mine.agent_id}/timeline")).status_code == 401
    by_operator = await operator_http.get(f"/v1/agents/{mine.agent_id}/timeline")
    assert by_operator.status_code == 200 and by_operator.json()["events"]
    assert by_operator.json()["events"][0]["kind"] == "trait.arrived"
    # the same from the command line, with the agent's own key (its agent by default)
    code, out, err = await invoke(api_url, "agents", "timeline", "--json", key=mine.api_key)
    assert code == 0, err
    assert json.loads(out)["events"] == answer.json()["events"]
    code, _, err = await invoke(api_url, "agents", "timeline", "--agent", mine.agent_id, key=other.api_key)
    assert code != 0 and "reads its own timeline only" in err, err


async def test_trait_set_changes_and_rollbacks_get_receipts_bound_to_their_journal_record(
    operator_http, sessions, tmp_path, settings
):
    # (receipts of the world are read by the agent they concern and operators: an operator lists them)
    from audit import receipts
    from genesis import signing
    from journal.reader import JournalReader

    await run_with_rollback(tmp_path, 450)
    keyring = signing.ensure_keyring(settings.receipt_keys_path)
    await projection.rebuild(sessions, tmp_path)
    headers = {r.header.seq: r.header for r in JournalReader(tmp_path / "records").records()}
    ours = {h.hash().hex() for h in headers.values()}
    before = await every_receipt(operator_http, kind="trait_set.changed")
    assert not [
        r for r in before if r["subject"].get("journal_header") in ours
    ]  # a rebuild without a keyring signs none
    async with sessions() as session, session.begin():
        from sqlalchemy import delete

        from genesis.db.models import AuditEventRow, AuditProjection

        await session.execute(delete(AuditEventRow))
        await session.execute(delete(AuditProjection))
    while await projection.project(sessions, tmp_path, keyring=keyring):
        pass
    await receipts.publish_public_keys(sessions, keyring)
    keys = {k: v for k, v in keyring.public_keys().items()}
    for kind, event_kinds in (
        ("trait_set.changed", {"trait.arrived", "trait.left"}),
        ("world.rollback", {"world.rollback"}),
    ):
        found = await every_receipt(operator_http, kind=kind)
        mine = [r for r in found if r["subject"].get("journal_header") in ours]  # receipts of this journal
        assert mine and {r["body"]["event"] for r in mine} == event_kinds
        for r in mine:
            signing.verify(receipts.from_json(r), keys)
            assert r["subject"]["journal_header"] == headers[r["subject"]["journal_seq"]].hash().hex()
    # projecting again signs nothing twice (one receipt per journal event)
    count = len(await every_receipt(operator_http))
    async with sessions() as session, session.begin():
        await session.execute(delete(AuditEventRow))
        await session.execute(delete(AuditProjection))
    while await projection.project(sessions, tmp_path, keyring=keyring):
        pass
    assert len(await every_receipt(operator_http)) == count
