"""The journal's retention as the manifest governs it (engine/process/retention.py): a change of the
manifest's ``retention`` takes effect in the running engine with an audit event; segments older
than the oldest kept snapshot are archived (chain-checked, replayable from the archive) or
deleted, each batch with a signed receipt; the journal's status reaches ``GET
/v1/journal/status`` and ``genesis journal status``.

A stack of its own (a fresh database, so the manifest it changes is nobody else's) and an
in-process engine with a trusted runner of three traits (tests/journal_worlds.py), its record
keeper, and the audit projection the worker runs."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import time

import httpx
import redis.asyncio as aioredis
from sqlalchemy import select

from audit import projection
from engine.core.verify import verify_range
from engine.process.main import keep_the_record
from genesis import signing
from genesis.db.models import AuditEventRow, ReceiptRow
from genesis.db.session import get_sessionmaker
from journal.rederive import rederive
from journal.retention import Archive
from journal.segments import segments
from tests.journal_worlds import journaled_engine
from tests.own_stack import own_settings
from tests.services import set_rules


async def wait_for(condition, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while True:
        found = await condition()
        if found:
            return found
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what}")
        await asyncio.sleep(0.3)


async def test_retention_archives_then_deletes_with_receipts_and_the_archive_replays(settings, start_api, tmp_path):
    own = await own_settings(
        settings,
        "retention",
        journal_dir=tmp_path / "journal",
        journal_segment_records=50,
        journal_snapshot_interval=100,
        journal_keep_last=2,
        journal_keep_every=1000,
        engine_seed=7,
        engine_initial_population=40,
        engine_metrics_port=0,
        receipt_keys_dir=tmp_path / "keys",
    )
    await set_rules(
        own.database_url,
        "retention test",
        retention={"keep_last": 2, "keep_every": 1000, "keep_ticks": 100, "segments": "archive"},
    )
    sessions = get_sessionmaker(own.database_url)
    redis = aioredis.from_url(own.redis_url)
    engine = journaled_engine(own)
    stop = asyncio.Event()
    keeping: asyncio.Task | None = None
    projecting: asyncio.Task | None = None
    try:
        await engine.run_ticks(450)
        # The trusted runner's mutations are on no record, so their rollback points would stay
        # pinned for ever (as an unknown mutation's are, to be safe): no mutation is open here.
        engine.journal.unpin(set())
        keyring = signing.ensure_keyring(own.receipt_keys_path)
        keeping = asyncio.create_task(keep_the_record(own, engine, keyring, redis, stop))

        async def receipt_of(kind: str):
            async with sessions() as session:
                return (await session.scalars(select(ReceiptRow).where(ReceiptRow.kind == kind))).first()

        # Retention keeps what the audit projection has not read: with no projector running
        # (the worker's), nothing is retired, however old.
        async def governed() -> bool:  # the keeper's first retention round read the manifest
            return engine.journal.policy.segments == "archive"

        await wait_for(governed, 10, "the manifest's retention in force")
        await asyncio.sleep(1)  # that round's retirement
        assert await receipt_of("journal.archived") is None
        projecting = asyncio.create_task(projection.follow(sessions, own.journal_dir, keyring, stop))
        archived = await wait_for(lambda: receipt_of("journal.archived"), 30, "a journal.archived receipt")
        archive = Archive(own.journal_archive_dir)
        entries = archive.entries()
        assert entries and entries[0].first_seq == 0, entries
        body = signing_body(archived)
        assert body["first_seq"] == 0 and body["last_seq"] == entries[-1].last_seq
        assert [s["sha256"] for s in body["segments"]] == [e.sha256 for e in entries]
        live_first = segments(own.journal_dir / "records")[0][0]
        assert live_first == entries[-1].last_seq + 1
        # the snapshot retention dropped for its age went to the archive, so its records replay from there
        assert [m.tick for m in archive.snapshots.kept()] == [0]
        report = await asyncio.to_thread(verify_range, own.journal_dir, 0, 120, None, own.journal_archive_dir)
        assert report["equal"] and report["ticks_checked"] >= 100 and report["snapshot_tick"] == 0, report
        with_journal_alone = await asyncio.to_thread(lambda: _refusal(own))
        assert "no kept snapshot" in with_journal_alone
        # The audit events of the archived records are derived again from the archive (what
        # `genesis audit verify --journal` and `python -m audit.projection --rebuild` read).
        derived = await asyncio.to_thread(rederive, own.journal_dir, live_first - 1, own.journal_archive_dir)
        assert derived.last_seq == live_first - 1
        async with sessions() as session:
            projected = (await session.scalars(select(AuditEventRow).where(AuditEventRow.seq < live_first))).all()
        assert projected and {(e.seq, e.idx) for e in projected} == set(derived.events)

        async def retention_event():
            async with sessions() as session:
                rows = (
                    await session.scalars(select(AuditEventRow).where(AuditEventRow.kind == "journal.retention"))
                ).all()
            return rows

        events = await wait_for(retention_event, 20, "the journal.retention audit event")
        assert (
            events[0].summary["policy"]["segments"] == "archive" and events[0].summary["previous"]["keep_ticks"] > 100
        )

        # The status the engine publishes, through the API and the CLI.
        api = await start_api(
            "api-retention", database_url=own.database_url, redis_url=own.redis_url, auth="open", journal_enabled=True
        )
        async with httpx.AsyncClient(base_url=api, timeout=30) as http:
            status = (await http.get("/v1/journal/status")).json()
        assert status["policy"] == {"keep_last": 2, "keep_every": 1000, "keep_ticks": 100, "segments": "archive"}
        assert status["archive"]["segments"] == len(entries) and status["first_seq"] == live_first
        assert status["disk"]["free_bytes"] > 0 and status["oldest_replayable_tick"] >= 300
        shown = subprocess.run(
            [sys.executable, "-m", "cli", "--api", api, "journal", "status"],
            capture_output=True,
            text=True,
            timeout=60,
            env={**os.environ, "COLUMNS": "200"},
        )
        assert shown.returncode == 0, shown.stderr
        assert f"archive      {len(entries)} segment(s)" in shown.stdout and "older segments: archive" in shown.stdout

        # A governed switch to delete: the next retired segments are deleted, with their receipt.
        await set_rules(own.database_url, "retention test: delete", retention={"segments": "delete"})
        await engine.run_ticks(300)
        deleted = await wait_for(lambda: receipt_of("journal.deleted"), 30, "a journal.deleted receipt")
        gone = signing_body(deleted)
        assert gone["first_seq"] == live_first and len(archive.entries()) == len(entries)
        assert segments(own.journal_dir / "records")[0][0] == gone["last_seq"] + 1
    finally:
        stop.set()
        if keeping is not None:
            await keeping
        if projecting is not None:
            await projecting
        await engine.close()
        engine.journal.close()
        await redis.aclose()


def signing_body(row: ReceiptRow) -> dict:
    from genesis import canonical

    return canonical.decode(row.body)["body"]


def _refusal(own) -> str:
    from engine.core.replay import ReplayError

    try:
        verify_range(own.journal_dir, 0, 120)
    except ReplayError as exc:
        return str(exc)
    return "replayed"


async def test_a_deployment_without_a_journal_says_so(operator_http):
    """The session's API runs with the journal off: its status is a 409 that says so, not a 503
    waiting for an engine that will never publish it."""
    response = await operator_http.get("/v1/journal/status")
    assert response.status_code == 409 and response.json()["error"] == "JOURNAL_OFF", response.text
