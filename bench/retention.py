"""The journal's disk under a retention policy: an hour of world (or ``--ticks``) in fast-forward,
the journal's directory sampled as it grows and as retention retires its segments.

    python -m bench.retention [--entities 150] [--ticks 216000] [--segments delete|archive]

One engine in this process, as `python -m engine` runs it: N Molbots carrying three gatekept
traits in a real trait-host container, its journal (segments of 3,600 records, a snapshot every
3,600 ticks, as in production) and the engine's record keeping beside the ticks
(``engine.process.main.keep_the_record``: receipts and retention, which reads the manifest in
force), with the audit projection into Postgres as the worker runs it (``audit.projection.follow``).
The manifest's retention is set for the run: the last 2 snapshots, every 60th for
``--keep-ticks`` (10 minutes of world by default), older segments archived or deleted
(``--segments``).

Prints one JSON object: the journal's bytes per hour of world (what it writes, retired or not),
the journal directory's size sampled over the run, its largest size in the first and the second
half and its growth over the second half (``flat`` when the second half's largest is within one
segment and a snapshot of the first half's), the segments retired, the archive's size, the
receipts of the retirements, the ticks per second, and the trait host's health: a host restart,
deadline miss, skipped tick or trait error fails the run (a journal of a world that was not whole
measured nothing).

Uses the database ``genesis_bench_retention`` (made fresh) and Redis db 13 (flushed).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy import func, select

from audit import projection
from bench.engine import build_world, validated_traits
from bench.journal import health
from genesis import signing
from genesis.config import Settings
from genesis.db.migrate import fresh_database
from genesis.db.models import ReceiptRow
from genesis.db.session import get_engine, get_sessionmaker
from governance.records import manifests
from journal.retention import directory_bytes
from pipeline import registry

TICKS_PER_HOUR = 216_000  # at 60 ticks/s
SAMPLE_EVERY_S = 5.0


def log(message: str) -> None:
    print(f"[bench.retention] {message}", file=sys.stderr, flush=True)


async def set_retention(database_url: str, retention: dict[str, Any]) -> None:
    async with get_engine(database_url).begin() as conn:
        await manifests.amend(conn, "bench.retention", retention=retention)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    from engine.process.journaling import WorldJournal
    from engine.process.live_traits import HostTraitRunner
    from engine.process.loop import Engine
    from engine.process.main import keep_the_record

    base = Settings()
    database_url = base.database_url.rsplit("/", 1)[0] + "/genesis_bench_retention"
    redis_url = base.redis_url.rsplit("/", 1)[0] + "/13"
    await fresh_database(database_url, "head")
    with tempfile.TemporaryDirectory(prefix="bench-retention-") as tmp:
        settings = base.override(
            database_url=database_url,
            redis_url=redis_url,
            journal_dir=Path(tmp) / "journal",
            journal_segment_records=3600,
            journal_snapshot_interval=3600,
            engine_fast_forward=True,
            engine_snapshot_interval=10**9,  # no telemetry snapshots: nothing observes this world
            engine_trait_deadline_ms=5000.0,
            engine_metrics_port=0,
            receipt_keys_dir=Path(tmp) / "keys",
            rounds_enabled=False,
        )
        policy = {"keep_last": 2, "keep_every": 60, "keep_ticks": args.keep_ticks, "segments": args.segments}
        await set_retention(database_url, policy)
        redis = aioredis.from_url(redis_url)
        await redis.flushdb()
        traits = validated_traits(3)
        for entry in traits:
            await registry.put_entry(redis, entry)
        names = [e.trait_name for e in traits]
        journal, world = WorldJournal.open(settings, lambda: build_world(args.entities, names, args.seed))
        runner = HostTraitRunner(settings, redis)
        engine = Engine(settings, runner, world=world, journal=journal)
        keyring = signing.ensure_keyring(settings.receipt_keys_path)
        stop = asyncio.Event()
        samples: list[dict[str, Any]] = []
        records_dir, archive_dir = settings.journal_dir / "records", settings.journal_archive_dir
        started = time.monotonic()
        try:
            await engine.start()
            if sorted(runner.active_traits()) != sorted(names):
                raise SystemExit(f"traits did not load into the host: {runner.active_traits()}")
            running = asyncio.create_task(engine.run(stop, max_ticks=args.ticks))
            await asyncio.wait([running], timeout=1.0)  # its first ticks
            # The bench's traits went live at the first tick and are on no record, so their rollback
            # points would stay pinned (as an unknown mutation's are, to be safe) and hold every
            # segment: none is under observation.
            journal.unpin(set())
            keeping = asyncio.create_task(keep_the_record(settings, engine, keyring, redis, stop))
            sessions = get_sessionmaker(settings.database_url)  # the projection, as the worker runs it
            projecting = asyncio.create_task(projection.follow(sessions, settings.journal_dir, keyring, stop))
            while not running.done():
                await asyncio.wait([running], timeout=SAMPLE_EVERY_S)
                samples.append(
                    {
                        "tick": engine.world.tick,
                        "journal_bytes": directory_bytes(records_dir),
                        "snapshots_bytes": directory_bytes(settings.journal_dir / "snapshots"),
                        "archive_bytes": directory_bytes(archive_dir),
                    }
                )
                log(json.dumps(samples[-1]))
            await running
            stop.set()
            await keeping
            await projecting
            elapsed = time.monotonic() - started
            healthy = health(engine, runner)
            appended = journal.writer.bytes_written
            retired = 0
            sessions = get_sessionmaker(database_url)
            async with sessions() as session:
                receipts = await session.scalar(
                    select(func.count()).select_from(ReceiptRow).where(ReceiptRow.kind.like("journal.%"))
                )
            if args.segments == "archive":
                retired = sum(1 for _ in (archive_dir / "records").glob("seg-*"))
        finally:
            stop.set()
            await engine.close()
            journal.close()
            await redis.aclose()
    if any(healthy.values()):
        raise SystemExit(f"the world was not whole: {healthy}")
    ticks = engine.world.tick
    half = [s for s in samples if s["tick"] > ticks / 2]
    first = [s for s in samples if s["tick"] <= ticks / 2]
    on_disk = [s["journal_bytes"] + s["snapshots_bytes"] for s in samples]
    first_max = max((s["journal_bytes"] + s["snapshots_bytes"] for s in first), default=0)
    second_max = max((s["journal_bytes"] + s["snapshots_bytes"] for s in half), default=0)
    segment_bytes = appended / max(ticks, 1) * 3600
    slope = _slope([(s["tick"], s["journal_bytes"] + s["snapshots_bytes"]) for s in half])
    return {
        "ticks": ticks,
        "entities": args.entities,
        "policy": policy,
        "ticks_per_second": round(ticks / elapsed, 1),
        "journal_bytes_written": appended,
        "journal_bytes_per_hour_of_world": round(appended / ticks * TICKS_PER_HOUR),
        "journal_dir_bytes_first_half_max": first_max,
        "journal_dir_bytes_second_half_max": second_max,
        "journal_dir_bytes_end": on_disk[-1] if on_disk else 0,
        "journal_dir_growth_per_10k_ticks_second_half": round(slope * 10_000),
        "flat": second_max <= first_max + segment_bytes + statistics.fmean([s["snapshots_bytes"] for s in samples]),
        "archive_bytes_end": samples[-1]["archive_bytes"] if samples else 0,
        "archived_segments": retired,
        "retirement_receipts": receipts,
        "samples": len(samples),
        "health": healthy,
    }


def _slope(points: list[tuple[int, int]]) -> float:
    if len(points) < 2:
        return 0.0
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    den = sum((x - mx) ** 2 for x in xs)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / den if den else 0.0


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m bench.retention", description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", type=int, default=150)
    parser.add_argument("--ticks", type=int, default=TICKS_PER_HOUR)
    parser.add_argument("--keep-ticks", type=int, default=36_000, help="the manifest's retention.keep_ticks")
    parser.add_argument("--segments", choices=("delete", "archive"), default="delete")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(run(args))), flush=True)


if __name__ == "__main__":
    main()
