"""What the journal costs and how fast replay is: the same world run side by side with and without
its journal, three live traits in real trait-host containers; then the journal replayed.

    python -m bench.journal --entities 500,5000 --ticks 600

Two engines on the same seeded world (bench/engine.py's: N Molbots carrying three gatekept traits,
population pinned at N), each with a trait host of its own, run unpaced in alternating blocks of
``--block`` ticks (so both see the same machine load): ``plain`` without a journal, ``journaled``
with one (every tick's inputs, probe and state hash appended; snapshots every 3,600 ticks as in
production). Prints one JSON object keyed by N with:

- ``plain_ms_p50`` / ``journaled_ms_p50``: the median tick (``Engine.tick_once``: views, the host,
  the step, the journal) after ``--warmup`` ticks, and ``journal_overhead`` = their ratio - 1
  (the target: at most 0.05); ``overhead_block_pairs``: the same ratio within each pair of
  blocks (which arm runs first alternates), its median and quartiles: how far one run's figure
  can be trusted on a machine whose load drifts;
- ``append_ms_mean``: the journal's own time per record (state digest, encoding, write);
- ``bytes_per_tick_per_1000_entities``: the journal's segment bytes per tick, per 1,000 Molbots;
- ``projection_ms_per_record``: what the engine's audit projection spends per record outside
  Postgres (``JournalTail.read``: read, check, decode; then ``events_of``), over the whole journal;
- ``replay_ticks_per_second``: ``engine.core.verify`` over the journaled ticks (no trait host), and its
  ratios to the live unpaced rate (``replay_vs_live``) and to the paced 60 ticks/s
  (``replay_vs_paced``) (the target: at least 10);
- the health of both hosts (restarts, deadline misses, skipped ticks, trait errors): all 0, or the
  benchmark fails — a figure of a world whose host was restarted measured nothing.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.engine import build_world, validated_traits
from genesis.config import Settings
from pipeline import registry

TARGET_OVERHEAD = 0.05
TARGET_REPLAY_RATIO = 10.0


async def make_engine(settings: Settings, n: int, seed: int, journal_dir: Path | None):
    import redis.asyncio as aioredis

    from engine.process.journaling import WorldJournal
    from engine.process.live_traits import HostTraitRunner
    from engine.process.loop import Engine

    redis = aioredis.from_url(settings.redis_url)
    runner = HostTraitRunner(settings, redis)
    names = [e.trait_name for e in validated_traits(3)]
    journal = None
    if journal_dir is not None:
        journal, world = WorldJournal.open(
            settings.override(journal_dir=journal_dir), lambda: build_world(n, names, seed)
        )
    else:
        world = build_world(n, names, seed)
    engine = Engine(settings, runner, world=world, journal=journal)
    await engine.start()
    if sorted(runner.active_traits()) != sorted(names):
        raise SystemExit(f"traits did not load into the host: {runner.active_traits()}")
    return engine, runner, redis


def health(engine, runner) -> dict[str, int]:
    s = runner.stats
    timings = runner.trait_timings().values()
    return {
        "host_restarts": s.restarts,
        "host_deadline_misses": s.deadline_misses,
        "skipped_ticks": s.skipped_ticks,
        "quarantined": len(s.quarantined),
        "trait_errors": engine.trait_errors + sum(t["errors"] + t["timeouts"] for t in timings),
    }


async def measure(n: int, ticks: int, warmup: int, block: int, seed: int, redis_db: int) -> dict[str, Any]:
    import redis.asyncio as aioredis

    from engine.core.verify import verify_range

    base = Settings()
    url = base.redis_url.rsplit("/", 1)[0] + f"/{redis_db}"
    settings = base.override(
        redis_url=url,
        engine_snapshot_interval=10**9,  # no telemetry snapshots: nothing observes these worlds
        engine_trait_deadline_ms=5000.0,
        journal_snapshot_interval=3600,
    )
    redis = aioredis.from_url(url)
    await redis.flushdb()
    for entry in validated_traits(3):
        await registry.put_entry(redis, entry)
    with tempfile.TemporaryDirectory(prefix="bench-journal-") as tmp:
        journal_dir = Path(tmp)
        plain, plain_runner, r1 = await make_engine(settings, n, seed, None)
        journaled, journaled_runner, r2 = await make_engine(settings, n, seed, journal_dir)
        arms = {"plain": plain, "journaled": journaled}
        times: dict[str, list[float]] = {"plain": [], "journaled": []}
        walls: dict[str, float] = {"plain": 0.0, "journaled": 0.0}
        clock = time.perf_counter
        try:
            for engine in arms.values():
                for _ in range(warmup):
                    await engine.tick_once()
            gc.collect()
            done = 0
            pairs: list[float] = []  # each pair of blocks: journaled median / plain median - 1
            while done < ticks:
                # which arm goes first alternates, so neither always follows the other's caches
                order = list(arms.items()) if (done // block) % 2 == 0 else list(reversed(arms.items()))
                medians = {}
                for name, engine in order:
                    started = clock()
                    block_times = []
                    for _ in range(min(block, ticks - done)):
                        t = clock()
                        await engine.tick_once()
                        block_times.append(clock() - t)
                    walls[name] += clock() - started
                    times[name].extend(block_times)
                    medians[name] = statistics.median(block_times)
                pairs.append(medians["journaled"] / medians["plain"] - 1.0)
                done += block
            journaled._flush_telemetry()
            first_tick = journaled.world.tick - len(times["journaled"])
            last_tick = journaled.world.tick
            healthy = {"plain": health(plain, plain_runner), "journaled": health(journaled, journaled_runner)}
            append_ms = journaled.journal.stats()["append_ms_mean"]
        finally:
            for engine in arms.values():
                await engine.close()
            if journaled.journal is not None:
                journaled.journal.close()
            for r in (r1, r2):
                await r.aclose()
        segment_bytes = sum(p.stat().st_size for p in (journal_dir / "records").glob("seg-*.gjl"))
        projection_ms = projection_ms_per_record(journal_dir / "records")
        journal_ticks = last_tick  # every tick since the world was created is in the journal
        report = verify_range(journal_dir, first_tick, last_tick)
        if not report["equal"]:
            raise SystemExit(f"replay of the journaled run diverged: {json.dumps(report['divergence'])[:500]}")
    await redis.flushdb()
    await redis.aclose()
    for name, h in healthy.items():
        if any(h.values()):
            raise SystemExit(f"the {name} run's trait host was not whole, nothing was measured: {h}")
    plain_p50 = statistics.median(times["plain"]) * 1000
    journaled_p50 = statistics.median(times["journaled"]) * 1000
    live_rate = len(times["journaled"]) / walls["journaled"]
    replay_rate = report["replay_ticks_per_second"]
    return {
        "entities": n,
        "ticks_each": ticks,
        "plain_ms_p50": round(plain_p50, 3),
        "journaled_ms_p50": round(journaled_p50, 3),
        "journal_overhead": round(journaled_p50 / plain_p50 - 1.0, 4),
        # the same, block pair by block pair: its median and spread (how much to trust the figure)
        "overhead_block_pairs": {
            "median": round(statistics.median(pairs), 4),
            "p25": round(_quantile(pairs, 0.25), 4),
            "p75": round(_quantile(pairs, 0.75), 4),
            "pairs": len(pairs),
        },
        "overhead_within_target": journaled_p50 / plain_p50 - 1.0 <= TARGET_OVERHEAD,
        "append_ms_mean": append_ms,
        "bytes_per_tick_per_1000_entities": round(segment_bytes / journal_ticks / (n / 1000.0)),
        "projection_ms_per_record": projection_ms,
        "live_ticks_per_s": round(live_rate, 1),
        "replay_ticks_per_second": replay_rate,
        "replay_vs_live": round(replay_rate / live_rate, 2),
        "replay_vs_paced": round(replay_rate / 60.0, 2),
        "replay_ticks_checked": report["ticks_checked"],
        "health": healthy,
    }


def projection_ms_per_record(records_dir: Path) -> float:
    """The audit projection's own time per record (as the engine follows the journal: a second's
    worth of records at a time), Postgres left out."""
    from journal.audit import events_of
    from journal.reader import JournalTail

    tail = JournalTail(records_dir)
    count = 0
    started = time.perf_counter()
    while batch := tail.read(60):
        for record in batch:
            events_of(record)
        count += len(batch)
    if not count:
        raise SystemExit("the journal held no records to project")
    return round((time.perf_counter() - started) * 1000 / count, 4)


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entities", default="500,5000", help="comma-separated world sizes")
    parser.add_argument("--ticks", type=int, default=600, help="measured ticks per arm")
    parser.add_argument("--warmup", type=int, default=200)
    parser.add_argument("--block", type=int, default=50, help="ticks per arm before switching")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--redis-db", type=int, default=14)
    args = parser.parse_args()
    out = {}
    for n in [int(v) for v in args.entities.split(",")]:
        out[str(n)] = asyncio.run(measure(n, args.ticks, args.warmup, args.block, args.seed, args.redis_db))
        print(f"# {n} entities done", file=sys.stderr, flush=True)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
